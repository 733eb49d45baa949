//! The core's unit tests run on the one simulated device ([`crate::sim`]), under the name they have always
//! used.

pub(crate) use crate::sim::SimDevice as MockDevice;

//! A device for the engine's unit tests: "device memory" is host memory owned by the mock, and every copy is
//! checked against what is live, so a write into freed memory is caught rather than silently done.

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::ops::DeviceOps;
use crate::types::{Agent, GlobalFlags, ModuleVariable, PointerInfo, PointerType};

/// Memory owned by the mock through a raw pointer (from `Box::into_raw`), so that the addresses handed to the
/// engine keep their provenance when the bookkeeping moves around.
pub(crate) struct Storage {
    ptr: *mut u8,
    len: usize,
}

impl Storage {
    fn new(fill: u8, len: usize) -> Self {
        let ptr = Box::into_raw(vec![fill; len].into_boxed_slice()).cast::<u8>();
        Storage { ptr, len }
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn fill(&mut self, value: u8) {
        // SAFETY: `ptr` owns `len` bytes (see `new`).
        unsafe { std::ptr::write_bytes(self.ptr, value, self.len) };
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly the boxed slice leaked in `new`, dropped once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

// SAFETY: `Storage` owns its memory exclusively, like the `Box<[u8]>` it came from.
unsafe impl Send for Storage {}

pub(crate) struct Region {
    pub storage: Storage,
    pub agent: Agent,
    pub kind: PointerType,
    pub flags: GlobalFlags,
    pub live: bool,
}

pub(crate) struct Variable {
    pub agent: Agent,
    pub name: &'static [u8],
    pub storage: Storage,
}

#[derive(Default)]
pub(crate) struct State {
    pub regions: Vec<Region>,
    pub variables: Vec<Variable>,
    /// Copies so far; the copy whose number equals `fail_copy_at` fails.
    pub copies: usize,
    pub fail_copy_at: usize,
    pub fail_scan: bool,
    pub fail_query: bool,
    pub queries: usize,
    pub locked: Vec<(usize, usize)>,
    pub locks: usize,
    pub unlocks: usize,
    /// Copies that touched freed or unknown device memory, and unlocks of ranges never locked.
    pub violations: usize,
}

#[derive(Clone, Default)]
pub(crate) struct MockDevice(pub Arc<Mutex<State>>);

impl MockDevice {
    pub fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    /// Allocates coarse-grained device memory of `agent` filled with `fill`; returns its address.
    pub fn alloc(&self, agent: Agent, size: usize, fill: u8) -> usize {
        self.alloc_kind(agent, size, fill, PointerType::Device, GlobalFlags::COARSE_GRAINED)
    }

    pub fn alloc_kind(&self, agent: Agent, size: usize, fill: u8, kind: PointerType, flags: GlobalFlags) -> usize {
        let storage = Storage::new(fill, size);
        let base = storage.as_ptr() as usize;
        self.state().regions.push(Region { storage, agent, kind, flags, live: true });
        base
    }

    pub fn free(&self, base: usize) {
        let mut state = self.state();
        let region = state.regions.iter_mut().find(|r| r.storage.as_ptr() as usize == base).unwrap();
        region.live = false;
        region.storage.fill(0xDD);
    }

    pub fn add_variable(&self, agent: Agent, name: &'static [u8], size: usize, fill: u8) -> usize {
        let storage = Storage::new(fill, size);
        let address = storage.as_ptr() as usize;
        self.state().variables.push(Variable { agent, name, storage });
        address
    }

    pub fn bytes(&self, address: usize, size: usize) -> Vec<u8> {
        // SAFETY: tests pass addresses of regions or variables the mock owns and keeps alive.
        unsafe { std::slice::from_raw_parts(address as *const u8, size) }.to_vec()
    }

    pub fn write(&self, address: usize, bytes: &[u8]) {
        // SAFETY: as in `bytes`; tests write only within live regions or variables.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), address as *mut u8, bytes.len()) };
    }
}

impl State {
    /// Whether `[address, address + len)` may be copied: host memory, or within one live region or variable.
    fn allowed(&self, address: usize, len: usize) -> bool {
        let within = |start: usize, size: usize| address >= start && address < start + size;
        for region in &self.regions {
            let start = region.storage.as_ptr() as usize;
            if within(start, region.storage.len()) {
                return region.live && address + len <= start + region.storage.len();
            }
        }
        for variable in &self.variables {
            let start = variable.storage.as_ptr() as usize;
            if within(start, variable.storage.len()) {
                return address + len <= start + variable.storage.len();
            }
        }
        true
    }
}

impl DeviceOps for MockDevice {
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        let mut state = self.state();
        state.copies += 1;
        if state.copies == state.fail_copy_at {
            return Err(Error::DeviceError);
        }
        if !state.allowed(dst as usize, bytes) || !state.allowed(src as usize, bytes) {
            state.violations += 1;
            return Err(Error::DeviceError);
        }
        // SAFETY: both ranges were checked against the mock's live memory, or are host memory the engine owns.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) };
        Ok(())
    }

    fn pointer_info(&self, ptr: *const u8) -> Result<PointerInfo> {
        let mut state = self.state();
        if state.fail_query {
            return Err(Error::DeviceError);
        }
        state.queries += 1;
        let address = ptr as usize;
        let unknown = PointerInfo {
            kind: PointerType::Unknown,
            global_flags: GlobalFlags::empty(),
            owner: Agent(0),
            base: 0,
            size: 0,
        };
        Ok(state.regions.iter().find(|r| r.live && r.storage.as_ptr() as usize == address).map_or(unknown, |r| {
            PointerInfo { kind: r.kind, global_flags: r.flags, owner: r.agent, base: address, size: r.storage.len() }
        }))
    }

    fn iterate_module_variables(&self, agent: Agent, visit: &mut dyn FnMut(&ModuleVariable<'_>) -> bool) -> Result<()> {
        let variables: Vec<(&'static [u8], usize, usize)> = {
            let state = self.state();
            if state.fail_scan {
                return Err(Error::DeviceError);
            }
            state
                .variables
                .iter()
                .filter(|v| v.agent == agent)
                .map(|v| (v.name, v.storage.as_ptr() as usize, v.storage.len()))
                .collect()
        };
        for (name, address, size) in variables {
            let variable = ModuleVariable { name: Some(name), address, size, is_constant: false };
            if !visit(&variable) {
                break;
            }
        }
        Ok(())
    }

    fn can_lock_host(&self) -> bool {
        true
    }

    fn host_lock(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
        let mut state = self.state();
        state.locked.push((ptr as usize, bytes));
        state.locks += 1;
        Ok(())
    }

    fn host_unlock(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
        let mut state = self.state();
        match state.locked.iter().position(|&range| range == (ptr as usize, bytes)) {
            Some(i) => {
                state.locked.swap_remove(i);
                state.unlocks += 1;
                Ok(())
            }
            None => {
                state.violations += 1;
                Err(Error::DeviceError)
            }
        }
    }
}

/* The include guard must make a second inclusion harmless: no redefined type, enum or macro. */
#include "kreplay.h"
#include "kreplay.h"

int header_twice_c(void);

int header_twice_c(void) {
  return kreplay_status_string(KREPLAY_STATUS_SUCCESS) != NULL ? 0 : 1;
}

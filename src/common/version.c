/*
 * version.c — the library's version string.
 */
#include "tide.h"

#define STR2(x) #x
#define STR(x) STR2(x)

TIDE_API const char *tide_version(void) {
    return STR(TIDE_VERSION_MAJOR) "." STR(TIDE_VERSION_MINOR) "." STR(TIDE_VERSION_PATCH);
}

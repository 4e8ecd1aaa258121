// Symbol visibility for libhcr: the library is built with hidden visibility and exports only what
// carries HCR_API.
#pragma once

#if defined(_WIN32)
#define HCR_API
#else
#define HCR_API __attribute__((visibility("default")))
#endif

// For Maru's own C++ code that uses the C API next to namespace maru: the C
// API names its handle `struct maru`, which C++ cannot have beside a
// namespace of the same name, so here the struct takes another tag. C struct
// tags are not part of the ABI; callers of the library see no difference.
#pragma once

#define maru maru_handle
#include "maru_direct.h"
#undef maru

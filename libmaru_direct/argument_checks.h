// The checks of arguments that several calls make alike: a chunk's path
// and a batch's size. Each returns 0 or a negative errno.
#pragma once

#include <cstddef>

namespace maru::direct {

int CheckPath(const char *path, bool *canonical = nullptr);

// The checks every batched call makes before it does anything.
int CheckBatch(const void *items, size_t n);

}  // namespace maru::direct

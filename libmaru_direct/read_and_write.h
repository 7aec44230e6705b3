// Copies between chunks and the caller's memory (read_and_write.cc), and
// the checks of one op that the asynchronous batches (async.cc) make too.
#pragma once

#include "maru_direct_internal.h"

namespace maru::direct {

// The checks of one op of maru_read_into_batch / maru_write_from_batch:
// 0 or a negative errno.
int CheckReadOp(const maru_read_op_t &op);
int CheckWriteOp(const maru_write_op_t &op);

}  // namespace maru::direct

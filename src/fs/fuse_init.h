// FuseInit: answers the kernel's INIT request with capabilities that the
// installed libfuse cannot name.
//
// Debian's libfuse 3.14 builds the INIT reply from the FUSE_CAP_* flags it
// knows; FUSE_DIRECT_IO_ALLOW_MMAP (kernel 6.6, libfuse 3.16) is not among
// them, and without it the kernel refuses MAP_SHARED mmap of a file opened
// with FOPEN_DIRECT_IO. So the INIT request is served here, before the
// session loop starts: libfuse answers it (calling the file system's init as
// always) into a pipe put in place of /dev/fuse for that one call, the reply
// gains the extra flags the kernel offered, and goes to the kernel.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <cstdint>

namespace maru {

// FUSE_DIRECT_IO_ALLOW_MMAP of <linux/fuse.h> 7.39, absent from older headers.
constexpr uint64_t kFuseDirectIoAllowMmap = 1ull << 36;

// Serves the session's first request, the INIT, adding those of `extra`
// (init flags, bits 32.. in flags2) that the kernel offers to what libfuse
// replies. Call after fuse_session_mount and before the session loop, on
// one thread. Returns the extra flags granted (0 if the kernel offered none,
// or the INIT failed), or a negative errno if the request could not be
// served (the session has then exited).
int64_t AnswerInit(fuse_session *se, uint64_t extra);

}  // namespace maru

// FuseInit: answers the kernel's INIT request with capabilities that the
// installed libfuse cannot name, or names and then leaves out.
//
// Debian's libfuse 3.14 builds the INIT reply from the FUSE_CAP_* flags it
// knows; FUSE_DIRECT_IO_ALLOW_MMAP (kernel 6.6, libfuse 3.16) is not among
// them, and without it the kernel refuses MAP_SHARED mmap of a file opened
// with FOPEN_DIRECT_IO. Two it knows, and turns on in conn->want by
// default, it never puts in the reply (libfuse 3.17 does):
// FUSE_PARALLEL_DIROPS, without which the kernel serves one lookup or
// readdir of a directory at a time, and FUSE_HANDLE_KILLPRIV. So the INIT
// request is served here, before the session loop starts: libfuse answers
// it (calling the file system's init as always) into a pipe put in place of
// /dev/fuse for that one call, the reply gains the extra flags the kernel
// offered, and goes to the kernel.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <cstdint>

namespace maru {

// FUSE_DIRECT_IO_ALLOW_MMAP of <linux/fuse.h> 7.39, absent from older headers.
constexpr uint64_t kFuseDirectIoAllowMmap = 1ull << 36;
// FUSE_PARALLEL_DIROPS and FUSE_HANDLE_KILLPRIV of <linux/fuse.h> (7.25, 7.26).
constexpr uint64_t kFuseParallelDirops = 1ull << 18;
constexpr uint64_t kFuseHandleKillpriv = 1ull << 19;

// Serves the session's first request, the INIT, adding those of `extra`
// (init flags as the kernel numbers them: bits 32.. go in flags2) that the
// kernel offers to what libfuse replies. Call after fuse_session_mount and before the session loop,
// on one thread. Returns the extra flags granted (0 if the kernel offered none, or the INIT
// failed), or a negative errno if the request could not be served (the session has then exited).
int64_t AnswerInit(fuse_session *se, uint64_t extra);

}  // namespace maru

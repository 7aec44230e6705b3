// Opens through the shared-memory index (src/client/index_session.h): read
// handles leased in slots of the index, without a message to the server.
#pragma once

#include <cstddef>

#include "handles.h"

namespace maru::direct {

// OpenFromIndex's answer when only the server can tell.
constexpr int kAskServer = 1;

// How OpenFromIndex takes its paths: as given (checked or not: an entry
// found proves its path valid and canonical, since the server enters only
// such paths, under a 128-bit keyed hash of each; a refusal proves nothing
// until the caller has checked the path), or in canonical form (checked
// paths, some not canonical: "//a/b/").
enum class PathForm { kAsGiven, kCanonical };

// Opens paths[0..n) (in `form`) through the index, in order, until one it
// cannot: *opened of them, leased in slots and tracked. Then the return
// tells why it stopped: 0 (all opened, or only the server can tell of the
// next), -ENOENT or -EACCES (the index proves the server would refuse the
// next), or another negative errno (the caller releases what was opened).
int OpenFromIndex(maru_t *m, maru::IndexReader *ix, const char *const *paths, PathForm form,
                  size_t n, maru_chunk_t **out, size_t *opened);

// OpenFromIndex without the lease: 0 for a chunk the server would count.
int CountFromIndex(maru::IndexReader *ix, const char *path);

}  // namespace maru::direct

// MARU_DCHECK(cond): an invariant of the code itself (refcounts, transaction
// state, extent ownership), checked in debug, test and sanitizer builds
// (without NDEBUG) and compiled out of release builds. A failure aborts with
// the condition and its place: it is a bug, never bad input (bad input gets
// an errno).
#pragma once

#include <cstdio>
#include <cstdlib>

#ifdef NDEBUG
#define MARU_DCHECK(cond) \
  do {                    \
    (void)sizeof(cond);   \
  } while (0)
#else
#define MARU_DCHECK(cond)                                                               \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
#endif

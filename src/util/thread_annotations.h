// Clang's thread-safety annotations: what each lock guards, said in a way
// the compiler checks (scripts/thread-safety.sh runs clang's
// -Wthread-safety over the tree). Under GCC they expand to nothing.
#pragma once

#if defined(__clang__)
#define MARU_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define MARU_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) MARU_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY MARU_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) MARU_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) MARU_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) MARU_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) MARU_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) MARU_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) MARU_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) MARU_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) MARU_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) MARU_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) MARU_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) MARU_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) MARU_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS MARU_THREAD_ANNOTATION(no_thread_safety_analysis)

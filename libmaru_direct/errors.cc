// maru_strerror(): this API's errno codes in words, each with the meaning it
// has here; any other code as strerror() says it.
#include <cstring>

#include "maru_direct_internal.h"

extern "C" {

const char *maru_strerror(int err) {
  if (err < 0) err = -err;
  switch (err) {
    case 0:
      return "success";
    case EBUSY:
      return "chunk is being written and not sealed yet";
    case ESTALE:
      return "lease or reservation lost (session expired or server restarted)";
    case ENOTCONN:
      return "metadata server unreachable";
    case ECONNREFUSED:
      return "no metadata server at that address";
    case ENODEV:
      return "pool device not visible on this host";
    case EBADMSG:
      return "chunk bytes do not match their checksum";
    case ECONNRESET:
      return "connection to the pool's agent lost";
  }
  return strerror(err);
}

}  // extern "C"

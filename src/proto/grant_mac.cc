#include "grant_mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace maru {

namespace {

void Put(std::string *out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// Fixed-width little-endian fields, not the protobuf encoding: the MAC must
// not depend on how a library version serializes.
std::string Encode(const rpc::Grant &g) {
  std::string s = "maru-grant-v1";
  Put(&s, g.session(), 8);
  Put(&s, g.uid(), 4);
  Put(&s, g.device(), 4);
  Put(&s, static_cast<uint64_t>(g.extents_size()), 4);
  for (const rpc::Extent &e : g.extents()) {
    Put(&s, e.device(), 4);
    Put(&s, e.offset(), 8);
    Put(&s, e.length(), 8);
  }
  Put(&s, g.writable() ? 1 : 0, 1);
  Put(&s, g.serial(), 8);
  Put(&s, static_cast<uint64_t>(g.expires_ms()), 8);
  return s;
}

}  // namespace

std::string NewGrantKey() {
  std::string key(kGrantKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char *>(key.data()), static_cast<int>(key.size())) != 1)
    return "";
  return key;
}

std::string GrantMac(const std::string &key, const rpc::Grant &grant) {
  const std::string data = Encode(grant);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char *>(data.data()), data.size(), mac, &len))
    return "";
  return std::string(reinterpret_cast<char *>(mac), len);
}

bool GrantMacValid(const std::string &key, const rpc::Grant &grant) {
  if (key.size() != kGrantKeyBytes) return false;
  const std::string want = GrantMac(key, grant);
  return !want.empty() && grant.mac().size() == want.size() &&
         CRYPTO_memcmp(want.data(), grant.mac().data(), want.size()) == 0;
}

}  // namespace maru

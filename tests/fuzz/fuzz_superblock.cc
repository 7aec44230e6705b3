// Superblock decode on arbitrary bytes: a daemon reads the first block of
// whatever device it is given.
#include <cstring>
#include <vector>

#include "alloc/superblock.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace maru;
  std::vector<uint8_t> block(kSuperblockBytes, 0);
  memcpy(block.data(), data, std::min<size_t>(size, block.size()));
  uint64_t device_size = 0;
  if (size > kSuperblockBytes + 8) memcpy(&device_size, data + kSuperblockBytes, 8);
  Result<Superblock> sb = Superblock::Decode(block.data(), device_size);
  if (sb.ok()) {
    // What decodes must describe a usable device and encode back the same.
    if (sb->unit < kMinUnit || sb->data_offset >= sb->size || sb->size > device_size)
      __builtin_trap();
    std::vector<uint8_t> again(kSuperblockBytes);
    sb->Encode(again.data());
    Result<Superblock> back = Superblock::Decode(again.data(), device_size);
    if (!back.ok() || back->epoch != sb->epoch || back->unit != sb->unit) __builtin_trap();
    (void)sb->Describe();
  }
  return 0;
}

#include "alloc/dax_device.h"

#include <daxctl/libdaxctl.h>

#include <cstring>

namespace maru {

Result<DaxGeometry> ProbeDaxDevice(const std::string &path) {
  std::string name = path.substr(path.rfind('/') + 1);
  daxctl_ctx *ctx = nullptr;
  if (int rc = daxctl_new(&ctx); rc < 0) return FromReturnCode(rc, "libdaxctl init failed");
  Result<DaxGeometry> result =
      Status::Error(ENODEV, path + " is not a devdax device known to libdaxctl");
  daxctl_region *region;
  daxctl_region_foreach(ctx, region) {
    daxctl_dev *dev;
    daxctl_dev_foreach(region, dev) {
      const char *devname = daxctl_dev_get_devname(dev);
      if (devname && name == devname) {
        DaxGeometry g;
        g.size = daxctl_dev_get_size(dev);
        g.align = daxctl_dev_get_align(dev);
        if (g.align == 0) g.align = 2u << 20;
        result = g;
      }
    }
  }
  daxctl_unref(ctx);
  return result;
}

}  // namespace maru

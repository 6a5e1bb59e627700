// libFuzzer target: weight deltas between versions (relay/delta.h). The input picks a coding and
// how the next version differs from a fixed base (which elements, by how much), then edits bytes
// of the encoded delta and cuts it short. The untouched delta must apply and give exactly what
// the encoder says receivers hold; an edited one must be refused or give those same bytes, and
// never write out of bounds.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "relay/delta.h"
#include "relay/wire.h"

namespace {

using laminar::DType;
using namespace laminar::relay;

struct Fixed {
  laminar::proto::WeightManifest manifest;
  std::vector<uint8_t> base;
};

const Fixed& Base() {
  static const Fixed fixed = [] {
    static std::vector<uint8_t> w(100 * 4), e(70 * 2), ids(5 * 4);
    const std::vector<TensorBytes> tensors = {
        {"w", DType::kF32, {100}, w}, {"e", DType::kBF16, {70}, e}, {"ids", DType::kI32, {5}, ids}};
    Fixed f;
    f.manifest = *LayoutManifest(1, tensors, 256);
    f.base.resize(f.manifest.total_bytes());
    for (size_t i = 0; i < f.base.size(); ++i) f.base[i] = static_cast<uint8_t>(i * 37 % 251);
    for (int k = 0; k < 2; ++k) {  // finite floats: small values in the float tensors
      const auto& t = f.manifest.tensors(k);
      const size_t esize = k == 0 ? 4 : 2;
      for (size_t i = 0; i < t.size_bytes() / esize; ++i) {
        const float v = static_cast<float>(static_cast<int>(i % 17) - 8) * 0.01f;
        if (k == 0) {
          std::memcpy(f.base.data() + t.offset() + 4 * i, &v, 4);
        } else {
          const uint16_t b = laminar::FloatToBF16(v);
          std::memcpy(f.base.data() + t.offset() + 2 * i, &b, 2);
        }
      }
    }
    return f;
  }();
  return fixed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const Fixed& fixed = Base();
  const DeltaCoding coding = static_cast<DeltaCoding>(1 + data[0] % 3);
  const size_t stride = 1 + data[1] % 16;
  const float step = std::ldexp(1.0f, -(data[2] % 24));
  laminar::proto::WeightManifest manifest = fixed.manifest;
  manifest.set_version(2);
  std::vector<uint8_t> target = fixed.base;
  const auto& w = manifest.tensors(0);
  for (size_t i = 0; i < w.size_bytes() / 4; i += stride) {
    float v = 0;
    std::memcpy(&v, target.data() + w.offset() + 4 * i, 4);
    v += step * static_cast<float>(static_cast<int>(i % 5) - 2);
    std::memcpy(target.data() + w.offset() + 4 * i, &v, 4);
  }
  target[manifest.tensors(2).offset() + data[1] % 20] ^= data[2];  // an i32 byte
  std::vector<uint8_t> sender = fixed.base;
  auto delta = EncodeDelta(manifest, coding, 1, sender, 2, target);
  if (!delta.ok()) __builtin_trap();  // every input here is a version it can code
  std::vector<uint8_t> receiver = fixed.base;
  if (!ApplyDelta(*delta, manifest, 1, receiver, "fuzz").ok() || receiver != sender) {
    __builtin_trap();
  }
  // Edits: (offset low, offset high, value) triples; a trailing pair cuts the delta short.
  std::string edited = *delta;
  size_t k = 3;
  for (; k + 3 <= size; k += 3) {
    const size_t at = (data[k] | static_cast<size_t>(data[k + 1]) << 8) % edited.size();
    edited[at] = static_cast<char>(data[k + 2]);
  }
  if (k + 2 == size)
    edited.resize((data[k] | static_cast<size_t>(data[k + 1]) << 8) % edited.size());
  std::vector<uint8_t> held = fixed.base;
  if (ApplyDelta(edited, manifest, 1, held, "fuzz").ok() && held != sender) __builtin_trap();
  return 0;
}

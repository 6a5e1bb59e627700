// Fewer bytes per version: a version coded against the one every receiver already holds.
//   - kExact: per tensor, only the elements whose bits changed (gaps as LEB128 varints, then the
//     new element bytes), or the tensor whole where that is smaller. Applying it gives the
//     version bit for bit.
//   - kInt8 / kInt4: the difference (target - held) of each f32/bf16 tensor in blocks of
//     kDeltaBlock elements, each a f32 scale (max |difference| / 127 or / 7) and signed 8- or 4-bit
//     values rounded to nearest; other dtypes, and tensors whose exact section is smaller (few
//     elements changed), exactly. Receivers then hold the target within the
//     quantization error, and the sender holds what they hold, so the error one delta leaves is
//     part of the next delta's difference (error feedback; the idea of SDP4Bit's quantized weight
//     differences): it never accumulates.
// Every delta names its base version and the XXH64 of the base's bytes, and the XXH64 of the bytes
// it makes: a receiver never applies one to the wrong base (it asks for a full snapshot instead),
// and a delta that does not give those bytes is caught. DeltaEncoder sends a full snapshot every
// K versions and whenever asked (a receiver that missed one).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "proto/weights.pb.h"

namespace laminar::relay {

enum class DeltaCoding : uint8_t { kExact = 1, kInt8 = 2, kInt4 = 3 };

// "exact", "int8", "int4"; InvalidArgument naming the others.
StatusOr<DeltaCoding> ParseDeltaCoding(std::string_view name);
std::string_view DeltaCodingName(DeltaCoding coding);

// Elements per quantization block (one f32 scale each).
inline constexpr size_t kDeltaBlock = 64;

struct DeltaStats {
  uint64_t elements = 0;     // every element of the version
  uint64_t changed = 0;      // elements whose bits differ from what receivers held (all of
                             // them for a version sent whole)
  uint64_t bytes = 0;        // of the encoded delta
  uint64_t full_bytes = 0;   // of the version whole
  double max_abs_error = 0;  // max |target - what receivers hold after it| (0 for kExact)
};

// What a delta says about itself.
struct DeltaHeader {
  DeltaCoding coding = DeltaCoding::kExact;
  int64_t base_version = 0;
  uint64_t base_xxhash64 = 0;
  int64_t version = 0;
  uint64_t result_xxhash64 = 0;  // of the flat buffer applying it gives
  uint64_t total_bytes = 0;
  uint32_t num_tensors = 0;
};

// Encodes `target` (version `version`, laid out by `manifest`: the relay's flat version buffer)
// against `held`, the bytes every receiver holds for `base_version` (same layout), and updates
// `held` to what they hold once they apply it: `target`'s tensors themselves for kExact, within
// the quantization error for kInt8/kInt4 (bytes between tensors, alignment padding, stay). Errors:
// InvalidArgument when a buffer's size is not the manifest's, a tensor is out of its bounds,
// overlaps another or has an unknown dtype, or (kInt8/kInt4) a float element of `target` is not
// finite (named by tensor and index; send the version whole).
StatusOr<std::string> EncodeDelta(const proto::WeightManifest& manifest, DeltaCoding coding,
                                  int64_t base_version, std::span<uint8_t> held, int64_t version,
                                  std::span<const uint8_t> target, DeltaStats* stats = nullptr);

// Reads and checks a delta's fixed header. DataLoss naming `source` when it is not one.
StatusOr<DeltaHeader> ReadDeltaHeader(std::string_view delta, const std::string& source);

// Applies `delta` in place to `held`, the bytes of `held_version` laid out by `manifest` (the
// manifest of the version the delta makes). Checked before a byte is written: FailedPrecondition
// naming both versions when the delta's base is not `held_version` or not these bytes (the
// receiver needs a full snapshot); DataLoss naming `source` when it is not a delta to
// manifest.version() from an older version, does not match the manifest's layout or a section
// runs out of bounds; InvalidArgument when the manifest itself is malformed (tensors out of
// bounds or overlapping, an unknown dtype). After:
// DataLoss when the result's XXH64 is not the one the delta names (then `held` holds neither
// version, and the receiver needs a full snapshot).
Status ApplyDelta(std::string_view delta, const proto::WeightManifest& manifest,
                  int64_t held_version, std::span<uint8_t> held, const std::string& source);

// The sender's side of a stream of versions: each is sent whole (the first, every `full_every`-th
// version counted from the last full one, after a layout change, and after ForceFull) or as a
// delta against what receivers hold. Not thread-safe.
class DeltaEncoder {
 public:
  // full_every >= 1 (1: every version whole).
  DeltaEncoder(DeltaCoding coding, int full_every);

  struct Update {
    bool full = false;
    std::string delta;  // empty when full: send the version itself
    DeltaStats stats;
  };
  StatusOr<Update> Next(const proto::WeightManifest& manifest, int64_t version,
                        std::span<const uint8_t> data);
  // The next version is sent whole (a receiver missed one or failed to apply one).
  void ForceFull() { force_full_ = true; }
  // What receivers hold after the last update.
  std::span<const uint8_t> held() const { return held_; }

 private:
  DeltaCoding coding_;
  int full_every_;
  bool force_full_ = false;
  int since_full_ = 0;
  int64_t version_ = -1;
  std::string layout_;  // the last manifest without its version and checksums
  std::vector<uint8_t> held_;
};

}  // namespace laminar::relay

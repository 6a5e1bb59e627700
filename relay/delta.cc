#include "relay/delta.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "proto/codec.h"

namespace laminar::relay {

static_assert(std::endian::native == std::endian::little, "deltas are little-endian on the wire");

namespace {

constexpr char kMagic[8] = {'L', 'M', 'D', 'E', 'L', 'T', 'A', '1'};
constexpr size_t kHeaderBytes = 56;  // magic, coding, 3 pad, tensors, 5 x 8 bytes

enum class Section : uint8_t { kDense = 0, kSparse = 1, kQuantized = 2 };

// One tensor of the flat buffer.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  size_t offset = 0, bytes = 0, esize = 0, n = 0;
  bool quantizable() const { return dtype == DType::kF32 || dtype == DType::kBF16; }
};

StatusOr<std::vector<TensorView>> Tensors(const proto::WeightManifest& m, const std::string& what) {
  std::vector<TensorView> out;
  out.reserve(static_cast<size_t>(m.tensors_size()));
  for (const proto::TensorEntry& t : m.tensors()) {
    TensorView v{.name = t.name(), .offset = t.offset(), .bytes = t.size_bytes()};
    if (!ParseDType(t.dtype(), &v.dtype)) {
      return InvalidArgumentError(what + ": tensor '" + t.name() + "' has unknown dtype '" +
                                  t.dtype() + "'");
    }
    v.esize = DTypeSize(v.dtype);
    if (v.bytes % v.esize != 0 || v.offset > m.total_bytes() ||
        v.bytes > m.total_bytes() - v.offset) {
      return InvalidArgumentError(what + ": tensor '" + t.name() + "' (" + std::to_string(v.bytes) +
                                  " bytes at " + std::to_string(v.offset) + ") is not whole " +
                                  t.dtype() + " elements within the version's " +
                                  std::to_string(m.total_bytes()) + " bytes");
    }
    v.n = v.bytes / v.esize;
    out.push_back(std::move(v));
  }
  std::vector<const TensorView*> by_offset;
  by_offset.reserve(out.size());
  for (const TensorView& v : out) by_offset.push_back(&v);
  std::ranges::sort(by_offset, {}, [](const TensorView* v) { return v->offset; });
  const TensorView* last = nullptr;  // the one reaching furthest so far (empty ones take no room)
  for (const TensorView* v : by_offset) {
    if (v->bytes == 0) continue;
    if (last != nullptr && v->offset < last->offset + last->bytes) {
      return InvalidArgumentError(what + ": tensors '" + last->name + "' and '" + v->name +
                                  "' overlap");
    }
    last = v;
  }
  return out;
}

float LoadFloat(DType dtype, const uint8_t* p) {
  if (dtype == DType::kF32) {
    float f = 0;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t b = 0;
  std::memcpy(&b, p, 2);
  return BF16ToFloat(b);
}

void StoreFloat(DType dtype, float f, uint8_t* p) {
  if (dtype == DType::kF32) {
    std::memcpy(p, &f, 4);
  } else {
    const uint16_t b = FloatToBF16(f);
    std::memcpy(p, &b, 2);
  }
}

int QuantMax(DeltaCoding coding) { return coding == DeltaCoding::kInt8 ? 127 : 7; }

size_t QuantPayloadBytes(DeltaCoding coding, size_t m) {
  return coding == DeltaCoding::kInt8 ? m : (m + 1) / 2;
}

int QuantAt(DeltaCoding coding, const uint8_t* q, size_t i) {
  if (coding == DeltaCoding::kInt8) return static_cast<int8_t>(q[i]);
  const auto nibble = static_cast<uint8_t>(i % 2 == 0 ? q[i / 2] & 0x0f : q[i / 2] >> 4);
  return static_cast<int8_t>(static_cast<uint8_t>(nibble << 4)) >> 4;  // sign-extended
}

// held[i] += q[i] * scale for one block, rounded to the tensor's dtype. The sender and every
// receiver run this one function, so all of them hold the same bits (the result checksum says
// so); it is never inlined and never contracts into a fused multiply-add that one call site
// might use and another not. (A process that flushes subnormals to zero gets other bits for
// them: the result checksum then fails, and a full snapshot is needed.)
#if defined(__GNUC__) && !defined(__clang__)
[[gnu::noinline, gnu::optimize("fp-contract=off")]]
#else
[[gnu::noinline]]
#endif
void ApplyQuantBlock(DType dtype, DeltaCoding coding, float scale, const uint8_t* q, size_t m,
                     uint8_t* held) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  const size_t esize = DTypeSize(dtype);
  for (size_t i = 0; i < m; ++i) {
    const int level = QuantAt(coding, q, i);
    if (level == 0) continue;  // the element's bits stay (a -0.0 included)
    const float step = static_cast<float>(level) * scale;
    StoreFloat(dtype, LoadFloat(dtype, held + i * esize) + step, held + i * esize);
  }
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

size_t VarintBytes(uint64_t v) { return v < 0x80 ? 1 : 1 + VarintBytes(v >> 7); }

// What the exact section of one tensor holds: its changed elements, the bytes of their indices,
// and the section's size (sparse, or the tensor whole where that is smaller).
struct ExactPlan {
  uint64_t count = 0, gap_bytes = 0, bytes = 0;
  bool dense = false;
};

ExactPlan PlanExact(const TensorView& t, const uint8_t* held, const uint8_t* target) {
  ExactPlan plan;
  size_t last = 0;
  for (size_t i = 0; i < t.n; ++i) {
    if (std::memcmp(held + i * t.esize, target + i * t.esize, t.esize) != 0) {
      plan.gap_bytes += VarintBytes(i - last);
      last = i + 1;
      ++plan.count;
    }
  }
  plan.bytes = 1 + 16 + plan.gap_bytes + plan.count * t.esize;
  plan.dense = plan.bytes >= 1 + t.bytes;
  if (plan.dense) plan.bytes = 1 + t.bytes;
  return plan;
}

size_t QuantSectionBytes(const TensorView& t, DeltaCoding coding) {
  const size_t blocks = (t.n + kDeltaBlock - 1) / kDeltaBlock;
  return 1 + 4 * blocks + QuantPayloadBytes(coding, t.n);  // whole blocks have an even size
}

// Appends the exact section of one tensor as `plan` says.
void EncodeExactTensor(const TensorView& t, const ExactPlan& plan, const uint8_t* held,
                       const uint8_t* target, std::string* out) {
  if (plan.dense) {
    out->push_back(static_cast<char>(Section::kDense));
    out->append(reinterpret_cast<const char*>(target), t.bytes);
    return;
  }
  out->push_back(static_cast<char>(Section::kSparse));
  Put(out, plan.count);
  Put(out, plan.gap_bytes);
  // One pass: the indices at the section's end, the values after them (their sizes are known).
  const size_t gaps_at = out->size();
  out->resize(gaps_at + plan.gap_bytes + plan.count * t.esize);
  char* gap = out->data() + gaps_at;
  char* value = gap + plan.gap_bytes;
  size_t last = 0;
  for (size_t i = 0; i < t.n; ++i) {
    if (std::memcmp(held + i * t.esize, target + i * t.esize, t.esize) != 0) {
      for (uint64_t v = i - last;; v >>= 7) {
        *gap++ = static_cast<char>(v < 0x80 ? v : (v & 0x7f) | 0x80);
        if (v < 0x80) break;
      }
      std::memcpy(value, target + i * t.esize, t.esize);
      value += t.esize;
      last = i + 1;
    }
  }
}

// Appends the quantized section of one f32/bf16 tensor and applies it to `held`.
void EncodeQuantTensor(const TensorView& t, DeltaCoding coding, uint8_t* held,
                       const uint8_t* target, std::string* out, DeltaStats* stats) {
  out->push_back(static_cast<char>(Section::kQuantized));
  const int qmax = QuantMax(coding);
  std::vector<uint8_t> q(kDeltaBlock);
  for (size_t b = 0; b < t.n; b += kDeltaBlock) {
    const size_t m = std::min(kDeltaBlock, t.n - b);
    uint8_t* h = held + b * t.esize;
    const uint8_t* x = target + b * t.esize;
    double max_abs = 0;
    for (size_t i = 0; i < m; ++i) {
      stats->changed += std::memcmp(h + i * t.esize, x + i * t.esize, t.esize) != 0;
      const double d = static_cast<double>(LoadFloat(t.dtype, x + i * t.esize)) -
                       static_cast<double>(LoadFloat(t.dtype, h + i * t.esize));
      max_abs = std::max(max_abs, std::fabs(d));
    }
    // A difference too small for a normal f32 scale stays with the receivers' error, for the
    // next delta (error feedback) or the next full snapshot.
    auto scale = static_cast<float>(max_abs / qmax);
    if (!std::isnormal(scale)) scale = 0;
    std::fill(q.begin(), q.end(), 0);
    for (size_t i = 0; i < m && scale != 0; ++i) {
      const double d = static_cast<double>(LoadFloat(t.dtype, x + i * t.esize)) -
                       static_cast<double>(LoadFloat(t.dtype, h + i * t.esize));
      const auto v = static_cast<int>(std::clamp(std::lrint(d / scale), -long{qmax}, long{qmax}));
      if (coding == DeltaCoding::kInt8) {
        q[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
      } else {
        q[i / 2] |= static_cast<uint8_t>((v & 0x0f) << (i % 2 == 0 ? 0 : 4));
      }
    }
    Put(out, scale);
    out->append(reinterpret_cast<const char*>(q.data()), QuantPayloadBytes(coding, m));
    ApplyQuantBlock(t.dtype, coding, scale, q.data(), m, h);
    for (size_t i = 0; i < m; ++i) {
      const double err = std::fabs(static_cast<double>(LoadFloat(t.dtype, x + i * t.esize)) -
                                   static_cast<double>(LoadFloat(t.dtype, h + i * t.esize)));
      stats->max_abs_error = std::max(stats->max_abs_error, err);
    }
  }
}

uint64_t Checksum(std::span<const uint8_t> bytes) {
  return proto::Checksum(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// Reads the delta's sections in order; checks each is in bounds and, for sparse ones, that
// every index is inside its tensor. With `held` set, applies them.
class SectionReader {
 public:
  SectionReader(std::string_view delta, const std::string& source)
      : p_(reinterpret_cast<const uint8_t*>(delta.data()) + kHeaderBytes),
        end_(reinterpret_cast<const uint8_t*>(delta.data()) + delta.size()),
        source_(source) {}

  Status Walk(const std::vector<TensorView>& tensors, DeltaCoding coding, uint8_t* held) {
    for (const TensorView& t : tensors) {
      LAMINAR_RETURN_IF_ERROR(Tensor(t, coding, held == nullptr ? nullptr : held + t.offset));
    }
    if (p_ != end_) return Bad("has " + std::to_string(end_ - p_) + " bytes after its sections");
    return OkStatus();
  }

 private:
  Status Bad(const std::string& what) const { return DataLossError(source_ + ": " + what); }
  Status Need(size_t bytes, const TensorView& t) const {
    if (static_cast<size_t>(end_ - p_) < bytes) {
      return Bad("ends inside the section of tensor '" + t.name + "'");
    }
    return OkStatus();
  }

  Status Tensor(const TensorView& t, DeltaCoding coding, uint8_t* held) {
    LAMINAR_RETURN_IF_ERROR(Need(1, t));
    const auto kind = static_cast<Section>(*p_++);
    if (kind == Section::kDense) {
      LAMINAR_RETURN_IF_ERROR(Need(t.bytes, t));
      if (held != nullptr) std::memcpy(held, p_, t.bytes);
      p_ += t.bytes;
      return OkStatus();
    }
    if (kind == Section::kSparse) {
      uint64_t count = 0, gap_bytes = 0;
      LAMINAR_RETURN_IF_ERROR(Need(16, t));
      std::memcpy(&count, p_, 8);
      std::memcpy(&gap_bytes, p_ + 8, 8);
      p_ += 16;
      if (count > t.n || gap_bytes > static_cast<uint64_t>(end_ - p_) ||
          count * t.esize > static_cast<uint64_t>(end_ - p_) - gap_bytes) {
        return Bad("section of tensor '" + t.name + "' claims " + std::to_string(count) +
                   " elements and " + std::to_string(gap_bytes) + " index bytes it does not hold");
      }
      const uint8_t* gaps = p_;
      const uint8_t* gaps_end = p_ + gap_bytes;
      const uint8_t* values = gaps_end;
      uint64_t index = 0;
      for (uint64_t k = 0; k < count; ++k) {
        uint64_t gap = 0;
        for (int shift = 0;; shift += 7) {
          if (gaps == gaps_end || shift > 63) {
            return Bad("index " + std::to_string(k) + " of tensor '" + t.name + "' is malformed");
          }
          gap |= static_cast<uint64_t>(*gaps & 0x7f) << shift;
          if ((*gaps++ & 0x80) == 0) break;
        }
        if (gap >= t.n - index) {
          return Bad("index " + std::to_string(k) + " of tensor '" + t.name + "' is past its " +
                     std::to_string(t.n) + " elements");
        }
        index += gap;
        if (held != nullptr) std::memcpy(held + index * t.esize, values + k * t.esize, t.esize);
        ++index;
      }
      if (gaps != gaps_end) return Bad("indices of tensor '" + t.name + "' have bytes left over");
      p_ = values + count * t.esize;
      return OkStatus();
    }
    if (kind == Section::kQuantized && coding != DeltaCoding::kExact && t.quantizable()) {
      for (size_t b = 0; b < t.n; b += kDeltaBlock) {
        const size_t m = std::min(kDeltaBlock, t.n - b);
        const size_t payload = QuantPayloadBytes(coding, m);
        LAMINAR_RETURN_IF_ERROR(Need(4 + payload, t));
        float scale = 0;
        std::memcpy(&scale, p_, 4);
        if (!std::isfinite(scale)) {
          return Bad("block " + std::to_string(b / kDeltaBlock) + " of tensor '" + t.name +
                     "' has a non-finite scale");
        }
        if (held != nullptr) ApplyQuantBlock(t.dtype, coding, scale, p_ + 4, m, held + b * t.esize);
        p_ += 4 + payload;
      }
      return OkStatus();
    }
    return Bad("section of tensor '" + t.name + "' has kind " +
               std::to_string(static_cast<int>(kind)) + ", not one a " +
               std::string(DeltaCodingName(coding)) + " delta of a " +
               std::string(DTypeName(t.dtype)) + " tensor has");
  }

  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& source_;
};

}  // namespace

StatusOr<DeltaCoding> ParseDeltaCoding(std::string_view name) {
  if (name == "exact") return DeltaCoding::kExact;
  if (name == "int8") return DeltaCoding::kInt8;
  if (name == "int4") return DeltaCoding::kInt4;
  return InvalidArgumentError("delta coding '" + std::string(name) +
                              "' is not one of exact, int8, int4");
}

std::string_view DeltaCodingName(DeltaCoding coding) {
  switch (coding) {
    case DeltaCoding::kExact:
      return "exact";
    case DeltaCoding::kInt8:
      return "int8";
    case DeltaCoding::kInt4:
      return "int4";
  }
  return "unknown";
}

StatusOr<std::string> EncodeDelta(const proto::WeightManifest& manifest, DeltaCoding coding,
                                  int64_t base_version, std::span<uint8_t> held, int64_t version,
                                  std::span<const uint8_t> target, DeltaStats* stats) {
  const std::string what = "delta of version " + std::to_string(version);
  LAMINAR_ASSIGN_OR_RETURN(std::vector<TensorView> tensors, Tensors(manifest, what));
  if (held.size() != manifest.total_bytes() || target.size() != manifest.total_bytes()) {
    return InvalidArgumentError(what + ": buffers of " + std::to_string(held.size()) + " and " +
                                std::to_string(target.size()) + " bytes for a layout of " +
                                std::to_string(manifest.total_bytes()));
  }
  const bool quantize = coding != DeltaCoding::kExact;
  // Checked before `held` changes: a version that cannot be coded leaves it as it was. A tensor
  // goes lossy only where every element held is finite and its difference to the target is far
  // from f32's range (a version sent whole with a NaN is then repaired exactly, not stuck).
  std::vector<bool> lossy(tensors.size(), false);
  for (size_t k = 0; quantize && k < tensors.size(); ++k) {
    const TensorView& t = tensors[k];
    lossy[k] = t.quantizable();
    for (size_t i = 0; t.quantizable() && i < t.n; ++i) {
      const float x = LoadFloat(t.dtype, target.data() + t.offset + i * t.esize);
      const float h = LoadFloat(t.dtype, held.data() + t.offset + i * t.esize);
      constexpr double kLargest = 1e37;
      lossy[k] = lossy[k] && std::isfinite(h) && std::fabs(static_cast<double>(x) - h) < kLargest;
      if (!std::isfinite(x)) {
        return InvalidArgumentError(what + ": element " + std::to_string(i) + " of tensor '" +
                                    t.name + "' is not finite; a " +
                                    std::string(DeltaCodingName(coding)) +
                                    " delta cannot carry it (send the version whole)");
      }
    }
  }
  DeltaStats local;
  DeltaStats& s = stats != nullptr ? *stats : local;
  s = DeltaStats{.full_bytes = manifest.total_bytes()};
  std::string out(kHeaderBytes, '\0');
  const uint64_t base_hash = Checksum(held);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorView& t = tensors[k];
    s.elements += t.n;
    uint8_t* h = held.data() + t.offset;
    const uint8_t* x = target.data() + t.offset;
    // A lossy section only where it is smaller than the exact one: a tensor that changed in few
    // elements (bf16 weights under small steps) goes exactly, and costs less.
    const ExactPlan plan = PlanExact(t, h, x);
    if (lossy[k] && QuantSectionBytes(t, coding) < plan.bytes) {
      EncodeQuantTensor(t, coding, h, x, &out, &s);
    } else {
      s.changed += plan.count;
      EncodeExactTensor(t, plan, h, x, &out);
      std::memcpy(h, x, t.bytes);
    }
  }
  char* h = out.data();
  std::memcpy(h, kMagic, 8);
  h[8] = static_cast<char>(coding);
  const auto num_tensors = static_cast<uint32_t>(tensors.size());
  const uint64_t result_hash = Checksum(held);
  const uint64_t total = manifest.total_bytes();
  std::memcpy(h + 12, &num_tensors, 4);
  std::memcpy(h + 16, &base_version, 8);
  std::memcpy(h + 24, &base_hash, 8);
  std::memcpy(h + 32, &version, 8);
  std::memcpy(h + 40, &result_hash, 8);
  std::memcpy(h + 48, &total, 8);
  s.bytes = out.size();
  return out;
}

StatusOr<DeltaHeader> ReadDeltaHeader(std::string_view delta, const std::string& source) {
  if (delta.size() < kHeaderBytes || std::memcmp(delta.data(), kMagic, 8) != 0) {
    return DataLossError(source + ": not a weight delta (" + std::to_string(delta.size()) +
                         " bytes, no LMDELTA1 header)");
  }
  DeltaHeader h;
  const auto coding = static_cast<uint8_t>(delta[8]);
  if (coding < 1 || coding > 3) {
    return DataLossError(source + ": weight delta of unknown coding " + std::to_string(coding));
  }
  if (delta[9] != 0 || delta[10] != 0 || delta[11] != 0) {
    return DataLossError(source + ": weight delta header has nonzero padding");
  }
  h.coding = static_cast<DeltaCoding>(coding);
  std::memcpy(&h.num_tensors, delta.data() + 12, 4);
  std::memcpy(&h.base_version, delta.data() + 16, 8);
  std::memcpy(&h.base_xxhash64, delta.data() + 24, 8);
  std::memcpy(&h.version, delta.data() + 32, 8);
  std::memcpy(&h.result_xxhash64, delta.data() + 40, 8);
  std::memcpy(&h.total_bytes, delta.data() + 48, 8);
  return h;
}

Status ApplyDelta(std::string_view delta, const proto::WeightManifest& manifest,
                  int64_t held_version, std::span<uint8_t> held, const std::string& source) {
  LAMINAR_ASSIGN_OR_RETURN(DeltaHeader h, ReadDeltaHeader(delta, source));
  const std::string what =
      source + ": delta " + std::to_string(h.base_version) + " -> " + std::to_string(h.version);
  if (h.version != manifest.version() || h.version <= h.base_version) {
    return DataLossError(what + " is not a delta to version " + std::to_string(manifest.version()) +
                         " from an older one");
  }
  if (h.base_version != held_version) {
    return FailedPreconditionError(what + " needs version " + std::to_string(h.base_version) +
                                   ", version " + std::to_string(held_version) +
                                   " is held: a full snapshot is needed");
  }
  if (h.total_bytes != manifest.total_bytes() ||
      h.num_tensors != static_cast<uint32_t>(manifest.tensors_size()) ||
      held.size() != manifest.total_bytes()) {
    return DataLossError(what + " is for " + std::to_string(h.num_tensors) + " tensors in " +
                         std::to_string(h.total_bytes) + " bytes, the manifest has " +
                         std::to_string(manifest.tensors_size()) + " in " +
                         std::to_string(manifest.total_bytes()) +
                         " (held: " + std::to_string(held.size()) + ")");
  }
  if (Checksum(held) != h.base_xxhash64) {
    return FailedPreconditionError(what + ": the bytes held for version " +
                                   std::to_string(held_version) +
                                   " are not its base (checksum differs): a full snapshot is "
                                   "needed");
  }
  LAMINAR_ASSIGN_OR_RETURN(std::vector<TensorView> tensors, Tensors(manifest, what));
  LAMINAR_RETURN_IF_ERROR(SectionReader(delta, what).Walk(tensors, h.coding, nullptr));
  LAMINAR_RETURN_IF_ERROR(SectionReader(delta, what).Walk(tensors, h.coding, held.data()));
  if (Checksum(held) != h.result_xxhash64) {
    return DataLossError(what +
                         " did not give the bytes it names (checksum differs): a full "
                         "snapshot is needed");
  }
  return OkStatus();
}

DeltaEncoder::DeltaEncoder(DeltaCoding coding, int full_every)
    : coding_(coding), full_every_(std::max(1, full_every)) {}

StatusOr<DeltaEncoder::Update> DeltaEncoder::Next(const proto::WeightManifest& manifest,
                                                  int64_t version, std::span<const uint8_t> data) {
  if (version <= version_) {
    return InvalidArgumentError("delta encoder: version " + std::to_string(version) +
                                " after version " + std::to_string(version_) +
                                " (versions only go up)");
  }
  proto::WeightManifest layout = manifest;
  layout.clear_header();
  layout.clear_version();
  layout.clear_chunk_xxhash64();
  std::string layout_bytes = layout.SerializeAsString();
  Update u;
  if (version_ >= 0 && !force_full_ && since_full_ + 1 < full_every_ && layout_bytes == layout_) {
    auto delta = EncodeDelta(manifest, coding_, version_, held_, version, data, &u.stats);
    if (delta.ok()) {
      u.delta = std::move(*delta);
      ++since_full_;
      version_ = version;
      return u;
    }
    if (delta.status().code() != StatusCode::kInvalidArgument) return delta.status();
    // A version a delta cannot carry (a non-finite weight under a lossy coding): whole.
  }
  if (data.size() != manifest.total_bytes()) {
    return InvalidArgumentError("delta encoder: version " + std::to_string(version) + " has " +
                                std::to_string(data.size()) + " bytes, its manifest " +
                                std::to_string(manifest.total_bytes()));
  }
  held_.assign(data.begin(), data.end());
  layout_ = std::move(layout_bytes);
  u.full = true;
  u.stats.full_bytes = u.stats.bytes = data.size();
  for (const proto::TensorEntry& t : manifest.tensors()) {
    DType d = DType::kU8;
    if (ParseDType(t.dtype(), &d)) u.stats.elements += t.size_bytes() / DTypeSize(d);
  }
  u.stats.changed = u.stats.elements;
  since_full_ = 0;
  force_full_ = false;
  version_ = version;
  return u;
}

}  // namespace laminar::relay

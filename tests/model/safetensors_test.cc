// safetensors reader on the official samples, write/read round trips, and malformed inputs.
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "tests/test_util.h"

namespace laminar::model {
namespace {

// Element i of a (possibly misaligned) tensor, widened to double.
double ElementAsDouble(const SafetensorsTensor& t, int64_t i) {
  const uint8_t* p = t.data + i * static_cast<int64_t>(DTypeSize(t.dtype));
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t.dtype) {
    case DType::kU8:
      return load(uint8_t{});
    case DType::kI8:
      return load(int8_t{});
    case DType::kU16:
      return load(uint16_t{});
    case DType::kI16:
      return load(int16_t{});
    case DType::kU32:
      return load(uint32_t{});
    case DType::kI32:
      return load(int32_t{});
    case DType::kI64:
      return static_cast<double>(load(int64_t{}));
    case DType::kF16:
      return HalfToFloat(load(uint16_t{}));
    case DType::kBF16:
      return BF16ToFloat(load(uint16_t{}));
    case DType::kF32:
      return load(float{});
    case DType::kF64:
      return load(double{});
    case DType::kBool:
      return load(uint8_t{});
  }
  return 0;
}

// The samples hold arange(-3, 3) cast to each dtype (unsigned types wrap around).
struct Sample {
  const char* name;
  DType dtype;
  std::vector<double> values;
};
const std::vector<Sample>& Samples() {
  static const std::vector<Sample> kSamples = {
      {"B", DType::kU8, {253, 254, 255, 0, 1, 2}},
      {"H", DType::kU16, {65533, 65534, 65535, 0, 1, 2}},
      {"I", DType::kU32, {4294967293.0, 4294967294.0, 4294967295.0, 0, 1, 2}},
      {"b", DType::kI8, {-3, -2, -1, 0, 1, 2}},
      {"h", DType::kI16, {-3, -2, -1, 0, 1, 2}},
      {"i", DType::kI32, {-3, -2, -1, 0, 1, 2}},
      {"e", DType::kF16, {-3, -2, -1, 0, 1, 2}},
      {"f", DType::kF32, {-3, -2, -1, 0, 1, 2}},
      {"d", DType::kF64, {-3, -2, -1, 0, 1, 2}},
  };
  return kSamples;
}

void ExpectSample(const SafetensorsFile& file, const Sample& s) {
  const SafetensorsTensor* t = file.Find(s.name);
  ASSERT_NE(t, nullptr) << s.name;
  EXPECT_EQ(t->dtype, s.dtype) << s.name;
  EXPECT_EQ(t->shape, Shape({6})) << s.name;
  ASSERT_EQ(t->size_bytes, 6 * DTypeSize(s.dtype));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(ElementAsDouble(*t, i), s.values[i]) << s.name << i;
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"test", "a"}}));
}

TEST(SafetensorsTest, OfficialSamplesParse) {
  LAMINAR_SHARED_OR_SKIP(dir, "safetensors");
  for (const Sample& s : Samples()) {
    auto file = SafetensorsFile::Open(dir + "/" + s.name + ".safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->tensors().size(), 1u);
    EXPECT_NE((8 + file->header_bytes()) % 8, 0u);  // the samples are not aligned
    ExpectSample(*file, s);
  }
}

TEST(SafetensorsTest, OverallSampleHasAllNine) {
  LAMINAR_SHARED_OR_SKIP(path, "safetensors/overall.safetensors");
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors().size(), 9u);
  for (size_t i = 1; i < file->tensors().size(); ++i) {
    EXPECT_LT(file->tensors()[i - 1].name, file->tensors()[i].name);
  }
  for (const Sample& s : Samples()) ExpectSample(*file, s);
  EXPECT_EQ(file->Find("missing"), nullptr);
  EXPECT_NE(file->backing(), nullptr);
}

// ---- round trip ----

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SafetensorsTest, WriteReadRoundTripAllDTypes) {
  auto dir = testing::TempDir("safetensors_roundtrip");
  const DType all[] = {DType::kBool, DType::kU8,   DType::kI8,  DType::kU16,
                       DType::kI16,  DType::kU32,  DType::kI32, DType::kI64,
                       DType::kF16,  DType::kBF16, DType::kF32, DType::kF64};
  std::vector<Tensor> owned;
  std::map<std::string, TensorView> views;
  for (DType d : all) {
    Tensor t(d, Shape({2, 3}));
    auto* bytes = t.data_as<uint8_t>();
    for (size_t i = 0; i < t.size_bytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
    if (d == DType::kBool)
      for (size_t i = 0; i < 6; ++i) bytes[i] = i % 2;
    views["t_" + std::string(DTypeName(d))] = t.view();
    owned.push_back(std::move(t));
  }
  Tensor scalar(DType::kF32, Shape{});
  *scalar.data_as<float>() = 1.5f;
  views["scalar"] = scalar.view();
  Tensor empty(DType::kF32, Shape({0, 4}));
  views["empty"] = empty.view();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "round \"trip\""}};
  std::string path = (dir / "all.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(path, views, meta).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((8 + file->header_bytes()) % 8, 0u);
  EXPECT_EQ(file->metadata(), meta);
  ASSERT_EQ(file->tensors().size(), views.size());
  uint64_t expected_offset = 0;
  for (const SafetensorsTensor& t : file->tensors()) {  // sorted by name, laid out in that order
    EXPECT_EQ(t.buffer_offset, expected_offset) << t.name;
    expected_offset += t.size_bytes;
    const TensorView& src = views.at(t.name);
    EXPECT_EQ(t.dtype, src.dtype()) << t.name;
    EXPECT_EQ(t.shape, src.shape()) << t.name;
    ASSERT_EQ(t.size_bytes, src.size_bytes()) << t.name;
    EXPECT_EQ(std::memcmp(t.data, src.data(), t.size_bytes), 0) << t.name;
  }
  // Writing again gives the same bytes (deterministic), and no temp file is left behind.
  std::string first = ReadAll(path);
  ASSERT_TRUE(WriteSafetensors(path, views, meta).ok());
  EXPECT_EQ(ReadAll(path), first);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
}

TEST(SafetensorsTest, WriterDefaultsToFormatPtAndRejectsBadItems) {
  auto dir = testing::TempDir("safetensors_writer");
  Tensor t(DType::kF32, Shape({2}));
  std::string path = (dir / "a.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(path, std::map<std::string, TensorView>{{"x", t.view()}}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");

  std::vector<SafetensorsWriteItem> items;
  items.push_back({"bad", DType::kF32, Shape({3}),
                   [&](Tensor*) -> StatusOr<TensorView> { return t.view(); }});  // 2 != 3
  Status st = WriteSafetensors((dir / "b.safetensors").string(), std::move(items));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'bad'"), std::string::npos) << st;
  EXPECT_FALSE(std::filesystem::exists(dir / "b.safetensors"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // no temp left

  std::vector<SafetensorsWriteItem> reserved;
  reserved.push_back({"__metadata__", DType::kF32, Shape({2}),
                      [&](Tensor*) -> StatusOr<TensorView> { return t.view(); }});
  EXPECT_FALSE(WriteSafetensors((dir / "c.safetensors").string(), std::move(reserved)).ok());
}

// ---- malformed input ----

std::vector<uint8_t> MakeFile(const std::string& header, size_t buffer_size, uint64_t n = ~0ull) {
  if (n == ~0ull) n = header.size();
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + buffer_size, 0x5a);
  return out;
}

// Parses and expects an error whose message contains `needle`.
void ExpectError(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto file = SafetensorsFile::Parse(bytes, "bad.safetensors");
  ASSERT_FALSE(file.ok()) << "expected an error containing: " << needle;
  EXPECT_NE(file.status().message().find("bad.safetensors"), std::string::npos) << file.status();
  EXPECT_NE(file.status().message().find(needle), std::string::npos) << file.status();
}

// A file the writer made (three dtypes, metadata, the header padded to 8 bytes) cut at every
// length short of the whole is an error, never a crash or a file that parses.
TEST(SafetensorsTest, TruncatedAtEveryLengthFails) {
  Tensor a(DType::kF32, Shape({2, 3})), b(DType::kBF16, Shape({5})), c(DType::kI64, Shape{});
  for (Tensor* t : {&a, &b, &c}) {
    auto* bytes = t->data_as<uint8_t>();
    for (size_t i = 0; i < t->size_bytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 29 + 3);
  }
  const std::string path = (testing::TempDir("safetensors_cut") / "m.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(path, {{"a", a.view()}, {"b", b.view()}, {"c", c.view()}},
                               {{"format", "pt"}})
                  .ok());
  std::string whole = ReadAll(path);
  for (size_t len = 0; len < whole.size(); ++len) {
    std::vector<uint8_t> bytes(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(len));
    auto file = SafetensorsFile::Parse(bytes, "cut");
    EXPECT_FALSE(file.ok()) << "length " << len;
  }
  std::vector<uint8_t> bytes(whole.begin(), whole.end());
  EXPECT_TRUE(SafetensorsFile::Parse(bytes, "whole").ok());
}

TEST(SafetensorsTest, MalformedHeadersGiveClearErrors) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_TRUE(SafetensorsFile::Parse(MakeFile(ok, 8), "good").ok());
  ExpectError(MakeFile(ok, 8, 1ull << 62), "exceeds the limit");
  ExpectError(MakeFile(ok, 8, 200ull << 20), "exceeds the limit");
  ExpectError(MakeFile(ok, 8, ok.size() + 9), "runs past the end of the file");
  ExpectError(MakeFile(R"({"a":{"dtype":"F32",)", 8), "not valid JSON");
  ExpectError(MakeFile(R"([1,2])", 0), "does not start with '{'");
  ExpectError(MakeFile("", 0), "does not start with '{'");
  ExpectError(MakeFile(ok, 4), "runs past the end of the buffer");
  ExpectError(MakeFile(ok, 12), "belong to no tensor");
  ExpectError(MakeFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
              "'a' has 8 bytes but shape [3] of F32 needs 12");
  ExpectError(MakeFile(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8),
              "tensor 'a': unknown dtype 'Q4'");
  ExpectError(MakeFile(R"({"a":{"dtype":"U64","shape":[1],"data_offsets":[0,8]}})", 8),
              "'U64' is not supported");
  ExpectError(MakeFile(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
              "negative");
  ExpectError(MakeFile(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8),
              "non-negative integer");
  ExpectError(MakeFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
              "end before begin");
  ExpectError(MakeFile(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "'data_offsets'");
  ExpectError(MakeFile(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), "'dtype'");
  ExpectError(MakeFile(R"({"a":[1]})", 8), "not a JSON object");
  ExpectError(
      MakeFile(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
               8),
      "__metadata__ value of 'k' is not a string");
  ExpectError(MakeFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                       8),
              "duplicate key 'a'");
  ExpectError(MakeFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       12),
              "'b' [4, 12) overlaps tensor 'a' [0, 8)");
  ExpectError(
      MakeFile(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8),
      "overflows");
  ExpectError(
      MakeFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,99999999999999999999]}})", 8),
      "data_offsets[1]");
  ExpectError(std::vector<uint8_t>{1, 2, 3}, "shorter than the 8-byte header length");
}

TEST(SafetensorsTest, TrailingSpacesAndEmptyFileAreValid) {
  auto file = SafetensorsFile::Parse(MakeFile("{}      ", 0), "empty");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors().empty());
}

}  // namespace
}  // namespace laminar::model

// CRC-32C against RFC 3720 Appendix B.4's vectors and the common check value, chunked
// extension, and TFRecord masking.
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace laminar {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

TEST(Crc32cTest, Rfc3720Vectors) {
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down), 0x113FDB5Cu);
  // An iSCSI SCSI Read (10) command PDU.
  const std::string pdu =
      Bytes({0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
             0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
             0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
             0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});
  ASSERT_EQ(pdu.size(), 48u);
  EXPECT_EQ(Crc32c(pdu), 0xD9963A56u);
}

TEST(Crc32cTest, CheckValueAndEmpty) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const std::string s = "the quick brown fox jumps over the lazy dog, 0123456789";
  for (size_t cut = 0; cut <= s.size(); cut += 7) {
    const uint32_t head = Crc32c(std::string_view(s).substr(0, cut));
    EXPECT_EQ(Crc32cExtend(head, s.data() + cut, s.size() - cut), Crc32c(s)) << "cut " << cut;
  }
}

TEST(Crc32cTest, MaskRoundTripsAndChangesValue) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x8A9136AAu}) {
    EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
    EXPECT_NE(MaskCrc32c(crc), crc);
  }
  // rotr(0, 15) + delta.
  EXPECT_EQ(MaskCrc32c(0), kCrc32cMaskDelta);
}

}  // namespace
}  // namespace laminar

// GgufWriter::WriteFile; the layout itself is in the header.
#include "model/gguf_writer.h"

#include "core/mapped_file.h"

namespace laminar::model {

Status GgufWriter::WriteFile(const std::string& path) const {
  return WriteFileAtomic(path, Finish());
}

}  // namespace laminar::model

// Element type sizes and names.
#include "attn/core/dtype.h"

namespace attn {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::Bool: return 1;
    case DType::I8: return 1;
    case DType::BF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
    case DType::I8: return "i8";
    case DType::BF16: return "bf16";
  }
  return "?";
}

}  // namespace attn

// File: runtime/rpc/label_codec.h
//
// Labels (key -> value maps) in their one wire form, pool_inventory.capnp's Label, which the
// inventory and the lease messages share. Decoding is left to each codec: lease requests check
// sizes field by field, inventories rely on the reader's traversal limit.
#ifndef GPUPOOL_RUNTIME_RPC_LABEL_CODEC_H_
#define GPUPOOL_RUNTIME_RPC_LABEL_CODEC_H_

#include <map>
#include <string>

#include "runtime/rpc/pool_inventory.capnp.h"

namespace gpupool::rpc {

inline void EncodeLabels(const std::map<std::string, std::string>& labels, capnp::List<Label>::Builder out) {
  unsigned i = 0;
  for (const auto& [k, v] : labels) {
    out[i].setKey(k);
    out[i].setValue(v);
    ++i;
  }
}

}  // namespace gpupool::rpc

#endif  // GPUPOOL_RUNTIME_RPC_LABEL_CODEC_H_

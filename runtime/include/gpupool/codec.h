// File: gpupool/codec.h
//
// How task arguments and results become bytes, so the same call can run in another process of
// the job. Built in: trivially copyable types (int, double, POD structs), std::string, std::vector,
// std::map, std::pair and std::optional of encodable types, nested as deep as you like.
//
// The one customisation point for your own types is a specialisation of gpupool::Codec:
//
//   struct Batch { std::string name; std::vector<float> values; };
//   template <> struct gpupool::Codec<Batch> {
//     static void Encode(gpupool::Writer& w, const Batch& b) {
//       gpupool::Encode(w, b.name);
//       gpupool::Encode(w, b.values);
//     }
//     static Batch Decode(gpupool::Reader& r) {
//       Batch b;
//       b.name = gpupool::Decode<std::string>(r);
//       b.values = gpupool::Decode<std::vector<float>>(r);
//       return b;
//     }
//   };
//
// Decoding is defensive: bytes that end early or announce impossible sizes throw gpupool::Error
// (kDataLoss) naming what was being read, never read past the end.
#ifndef GPUPOOL_CODEC_H_
#define GPUPOOL_CODEC_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpupool/error.h"

namespace gpupool {

// Appends to a byte string. Small payloads (a few ints) stay in the string's inline buffer, so
// encoding the arguments of a small task allocates nothing.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void Bytes(const void* data, size_t size) {
    out_.append(static_cast<const char*>(data), size);
  }
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }

 private:
  std::string& out_;
};

// Reads what a Writer wrote. Every read checks the remaining length.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  void Bytes(void* data, size_t size, const char* what) {
    Require(size, what);
    std::memcpy(data, in_.data(), size);
    in_.remove_prefix(size);
  }
  std::string_view Take(size_t size, const char* what) {
    Require(size, what);
    std::string_view s = in_.substr(0, size);
    in_.remove_prefix(size);
    return s;
  }
  uint64_t Varint(const char* what) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      Require(1, what);
      uint8_t byte = static_cast<uint8_t>(in_[0]);
      in_.remove_prefix(1);
      v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return v;
    }
    throw Error(ErrorCode::kDataLoss, std::string("malformed length while decoding ") + what);
  }
  // A count of elements that each take at least one byte cannot exceed what is left: refusing it
  // here keeps a corrupt length from allocating gigabytes before failing.
  size_t Count(const char* what) {
    uint64_t n = Varint(what);
    if (n > in_.size()) {
      throw Error(ErrorCode::kDataLoss, std::string("corrupt element count ") + std::to_string(n) +
                                            " while decoding " + what + " (" +
                                            std::to_string(in_.size()) + " bytes left)");
    }
    return static_cast<size_t>(n);
  }
  size_t remaining() const { return in_.size(); }

 private:
  void Require(size_t size, const char* what) {
    if (in_.size() < size) {
      throw Error(ErrorCode::kDataLoss, std::string("truncated bytes while decoding ") + what +
                                            ": need " + std::to_string(size) + ", have " +
                                            std::to_string(in_.size()));
    }
  }
  std::string_view in_;
};

// The customisation point. The primary template handles trivially copyable types; anything else
// must be specialised (a compile-time error says so).
template <typename T, typename Enable = void>
struct Codec {
  static_assert(std::is_trivially_copyable_v<T>,
                "gpupool: this type cannot be sent to a task. Specialise gpupool::Codec<T> "
                "(see gpupool/codec.h), or pass device memory as ObjectRef<DeviceBuffer>.");
  static void Encode(Writer& w, const T& v) { w.Bytes(&v, sizeof(T)); }
  static T Decode(Reader& r) {
    T v;
    r.Bytes(&v, sizeof(T), "a trivially copyable value");
    return v;
  }
};

template <typename T>
void Encode(Writer& w, const T& v) {
  Codec<T>::Encode(w, v);
}
template <typename T>
T Decode(Reader& r) {
  return Codec<T>::Decode(r);
}

template <>
struct Codec<std::string> {
  static void Encode(Writer& w, const std::string& s) {
    w.Varint(s.size());
    w.Bytes(s.data(), s.size());
  }
  static std::string Decode(Reader& r) {
    size_t n = r.Count("a string");
    return std::string(r.Take(n, "a string"));
  }
};

template <typename T, typename A>
struct Codec<std::vector<T, A>> {
  static void Encode(Writer& w, const std::vector<T, A>& v) {
    w.Varint(v.size());
    if constexpr (std::is_trivially_copyable_v<T> && !std::is_same_v<T, bool>) {
      w.Bytes(v.data(), v.size() * sizeof(T));
    } else {
      for (const T& e : v) gpupool::Encode(w, e);
    }
  }
  static std::vector<T, A> Decode(Reader& r) {
    size_t n = r.Count("a vector");
    std::vector<T, A> v;
    if constexpr (std::is_trivially_copyable_v<T> && !std::is_same_v<T, bool>) {
      if (n > r.remaining() / (sizeof(T) > 0 ? sizeof(T) : 1)) {
        throw Error(ErrorCode::kDataLoss, "corrupt vector length " + std::to_string(n));
      }
      v.resize(n);
      r.Bytes(v.data(), n * sizeof(T), "a vector");
    } else {
      v.reserve(n);
      for (size_t i = 0; i < n; ++i) v.push_back(gpupool::Decode<T>(r));
    }
    return v;
  }
};

template <typename K, typename V, typename C, typename A>
struct Codec<std::map<K, V, C, A>> {
  static void Encode(Writer& w, const std::map<K, V, C, A>& m) {
    w.Varint(m.size());
    for (const auto& [k, v] : m) {
      gpupool::Encode(w, k);
      gpupool::Encode(w, v);
    }
  }
  static std::map<K, V, C, A> Decode(Reader& r) {
    size_t n = r.Count("a map");
    std::map<K, V, C, A> m;
    for (size_t i = 0; i < n; ++i) {
      K k = gpupool::Decode<K>(r);
      m.emplace(std::move(k), gpupool::Decode<V>(r));
    }
    return m;
  }
};

template <typename A, typename B>
struct Codec<std::pair<A, B>, std::enable_if_t<!std::is_trivially_copyable_v<std::pair<A, B>>>> {
  static void Encode(Writer& w, const std::pair<A, B>& p) {
    gpupool::Encode(w, p.first);
    gpupool::Encode(w, p.second);
  }
  static std::pair<A, B> Decode(Reader& r) {
    A a = gpupool::Decode<A>(r);
    return {std::move(a), gpupool::Decode<B>(r)};
  }
};

template <typename T>
struct Codec<std::optional<T>, std::enable_if_t<!std::is_trivially_copyable_v<std::optional<T>>>> {
  static void Encode(Writer& w, const std::optional<T>& o) {
    w.Varint(o.has_value() ? 1 : 0);
    if (o) gpupool::Encode(w, *o);
  }
  static std::optional<T> Decode(Reader& r) {
    if (r.Varint("an optional") == 0) return std::nullopt;
    return gpupool::Decode<T>(r);
  }
};

}  // namespace gpupool

#endif  // GPUPOOL_CODEC_H_

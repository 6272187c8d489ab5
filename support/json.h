// A small JSON value with an order-keeping object, a parser and a writer:
// enough to merge benchmark results into an existing file without pulling a
// JSON library onto the GPU machine.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace warpstore::bench::json {

class parse_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct member;
class value;
using array = std::vector<value>;
using object = std::vector<member>;  // keeps insertion order

class value {
 public:
  // Constructors are defined below `member`: nvcc's front end instantiates
  // the variant's special members eagerly and needs `member` complete.
  value();
  value(std::nullptr_t);
  value(bool b);
  value(int i);
  value(unsigned i);
  value(long i);
  value(long long i);
  value(unsigned long i);
  value(unsigned long long i);
  value(double d);
  value(const char* s);
  value(std::string s);
  value(std::string_view s);
  value(array a);
  value(object o);
  value(const value&);
  value(value&&) noexcept;
  value& operator=(const value&);
  value& operator=(value&&) noexcept;
  ~value();

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_integer() const { return std::holds_alternative<std::int64_t>(v_); }
  bool is_number() const { return is_integer() || std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<array>(v_); }
  bool is_object() const { return std::holds_alternative<object>(v_); }

  bool as_bool() const { return get<bool>("a boolean"); }
  std::int64_t as_integer() const { return get<std::int64_t>("an integer"); }
  double as_number() const;
  const std::string& as_string() const { return get<std::string>("a string"); }
  const array& as_array() const { return get<array>("an array"); }
  array& as_array() { return get<array>("an array"); }
  const object& as_object() const { return get<object>("an object"); }
  object& as_object() { return get<object>("an object"); }

  // Object member by key, nullptr when absent (or when not an object).
  const value* find(std::string_view key) const;
  // Object member by key, inserted as null at the end when absent.
  value& operator[](std::string_view key);

  // Pretty-printed with `indent` spaces per level; objects and arrays whose
  // one-line form fits in `inline_width` columns stay on one line.
  std::string dump(int indent = 2, std::size_t inline_width = 100) const;
  static value parse(std::string_view text);

  friend bool operator==(const value& a, const value& b);

 private:
  template <class T>
  const T& get(const char* what) const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    throw std::logic_error(std::string("json value is not ") + what);
  }
  template <class T>
  T& get(const char* what) {
    if (T* p = std::get_if<T>(&v_)) return *p;
    throw std::logic_error(std::string("json value is not ") + what);
  }
  void write(std::string& out, int indent, int level, std::size_t inline_width) const;
  void write_compact(std::string& out) const;

  std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, array, object> v_;
};

struct member {
  std::string key;
  value val;
  friend bool operator==(const member& a, const member& b) {
    return a.key == b.key && a.val == b.val;
  }
};

inline value::value() : v_(nullptr) {}
inline value::value(std::nullptr_t) : v_(nullptr) {}
inline value::value(bool b) : v_(b) {}
inline value::value(int i) : v_(static_cast<std::int64_t>(i)) {}
inline value::value(unsigned i) : v_(static_cast<std::int64_t>(i)) {}
inline value::value(long i) : v_(static_cast<std::int64_t>(i)) {}
inline value::value(long long i) : v_(static_cast<std::int64_t>(i)) {}
inline value::value(double d) : v_(d) {}
inline value::value(const char* s) : v_(std::string(s)) {}
inline value::value(std::string s) : v_(std::move(s)) {}
inline value::value(std::string_view s) : v_(std::string(s)) {}
inline value::value(array a) : v_(std::move(a)) {}
inline value::value(object o) : v_(std::move(o)) {}
inline value::value(const value&) = default;
inline value::value(value&&) noexcept = default;
inline value& value::operator=(const value&) = default;
inline value& value::operator=(value&&) noexcept = default;
inline value::~value() = default;

// Builds an object in order: object_builder().add("a", 1).add("b", "x").done().
class object_builder {
 public:
  object_builder& add(std::string key, value v) {
    o_.push_back({std::move(key), std::move(v)});
    return *this;
  }
  object done() { return std::move(o_); }

 private:
  object o_;
};

// Escapes `s` as a JSON string literal, quotes included.
std::string quote(std::string_view s);

}  // namespace warpstore::bench::json

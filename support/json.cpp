#include "support/json.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace warpstore::bench::json {

value::value(unsigned long i) : value(static_cast<unsigned long long>(i)) {}
value::value(unsigned long long i) {
  if (i <= static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max()))
    v_ = static_cast<std::int64_t>(i);
  else
    v_ = static_cast<double>(i);
}

double value::as_number() const {
  if (const auto* i = std::get_if<std::int64_t>(&v_)) return static_cast<double>(*i);
  return get<double>("a number");
}

const value* value::find(std::string_view key) const {
  const auto* o = std::get_if<object>(&v_);
  if (!o) return nullptr;
  for (const auto& m : *o)
    if (m.key == key) return &m.val;
  return nullptr;
}

value& value::operator[](std::string_view key) {
  if (is_null()) v_ = object{};
  object& o = as_object();
  for (auto& m : o)
    if (m.key == key) return m.val;
  o.push_back({std::string(key), value{}});
  return o.back().val;
}

bool operator==(const value& a, const value& b) {
  if (a.is_number() && b.is_number() && (a.is_integer() != b.is_integer()))
    return a.as_number() == b.as_number();
  return a.v_ == b.v_;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static const char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

namespace {

void write_double(std::string& out, double d) {
  if (!std::isfinite(d)) {
    out += "null";  // JSON has no NaN or infinity
    return;
  }
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  if (ec != std::errc()) throw std::logic_error("json: cannot format a double");
  std::string_view s(buf, static_cast<std::size_t>(end - buf));
  out += s;
  // Keep it a JSON number that reads back as a double.
  if (s.find_first_of(".eEn") == std::string_view::npos) out += ".0";
}

}  // namespace

void value::write_compact(std::string& out) const {
  if (is_null()) out += "null";
  else if (const auto* b = std::get_if<bool>(&v_)) out += *b ? "true" : "false";
  else if (const auto* i = std::get_if<std::int64_t>(&v_)) out += std::to_string(*i);
  else if (const auto* d = std::get_if<double>(&v_)) write_double(out, *d);
  else if (const auto* s = std::get_if<std::string>(&v_)) out += quote(*s);
  else if (const auto* a = std::get_if<array>(&v_)) {
    out += '[';
    for (std::size_t k = 0; k < a->size(); ++k) {
      if (k) out += ", ";
      (*a)[k].write_compact(out);
    }
    out += ']';
  } else {
    const object& o = std::get<object>(v_);
    out += '{';
    for (std::size_t k = 0; k < o.size(); ++k) {
      if (k) out += ", ";
      out += quote(o[k].key);
      out += ": ";
      o[k].val.write_compact(out);
    }
    out += '}';
  }
}

void value::write(std::string& out, int indent, int level, std::size_t inline_width) const {
  if (!is_array() && !is_object()) {
    write_compact(out);
    return;
  }
  std::string one_line;
  write_compact(one_line);
  const std::size_t column = static_cast<std::size_t>(indent * level);
  if (one_line.size() + column <= inline_width || indent <= 0 ||
      (is_array() && as_array().empty()) || (is_object() && as_object().empty())) {
    out += one_line;
    return;
  }
  const std::string pad(static_cast<std::size_t>(indent * (level + 1)), ' ');
  const std::string close_pad(column, ' ');
  if (const auto* a = std::get_if<array>(&v_)) {
    out += "[\n";
    for (std::size_t k = 0; k < a->size(); ++k) {
      out += pad;
      (*a)[k].write(out, indent, level + 1, inline_width);
      out += k + 1 < a->size() ? ",\n" : "\n";
    }
    out += close_pad + "]";
    return;
  }
  const object& o = std::get<object>(v_);
  out += "{\n";
  for (std::size_t k = 0; k < o.size(); ++k) {
    out += pad + quote(o[k].key) + ": ";
    o[k].val.write(out, indent, level + 1, inline_width);
    out += k + 1 < o.size() ? ",\n" : "\n";
  }
  out += close_pad + "}";
}

std::string value::dump(int indent, std::size_t inline_width) const {
  std::string out;
  write(out, indent, 0, inline_width);
  return out;
}

// ---- parser -------------------------------------------------------------------

namespace {

class parser {
 public:
  explicit parser(std::string_view text) : s_(text) {}

  value document() {
    value v = parse_value(0);
    skip_space();
    if (pos_ != s_.size()) fail("trailing characters after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::size_t line = 1, col = 1;
    for (std::size_t k = 0; k < pos_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw parse_error("json: " + what + " at line " + std::to_string(line) + " column " +
                      std::to_string(col));
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' ||
                                s_[pos_] == '\r'))
      ++pos_;
  }
  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  void expect(char c) {
    skip_space();
    if (pos_ >= s_.size() || s_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  value parse_value(int depth) {
    if (depth > 256) fail("nesting too deep");
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    const char c = s_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return value(parse_string());
    if (consume("null")) return value(nullptr);
    if (consume("true")) return value(true);
    if (consume("false")) return value(false);
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    fail(std::string("unexpected character '") + c + "'");
  }

  value parse_object(int depth) {
    ++pos_;  // {
    object o;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return value(std::move(o));
    }
    for (;;) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a member name");
      std::string key = parse_string();
      expect(':');
      value v = parse_value(depth + 1);
      o.push_back({std::move(key), std::move(v)});
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return value(std::move(o));
    }
  }

  value parse_array(int depth) {
    ++pos_;  // [
    array a;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return value(std::move(a));
    }
    for (;;) {
      a.push_back(parse_value(depth + 1));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return value(std::move(a));
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }

  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (!consume("\\u")) fail("lone high surrogate");
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }

  value parse_number() {
    const std::size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    bool is_int = true;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        is_int = false;
        ++pos_;
      } else {
        break;
      }
    }
    const char* b = s_.data() + start;
    const char* e = s_.data() + pos_;
    if (is_int) {
      std::int64_t i = 0;
      const auto [end, ec] = std::from_chars(b, e, i);
      if (ec == std::errc() && end == e) return value(static_cast<long long>(i));
    }
    double d = 0;
    const auto [end, ec] = std::from_chars(b, e, d);
    if (ec != std::errc() || end != e) {
      pos_ = start;
      fail("bad number");
    }
    return value(d);
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

}  // namespace

value value::parse(std::string_view text) { return parser(text).document(); }

}  // namespace warpstore::bench::json

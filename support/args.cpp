#include "support/args.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>

#include "warpstore/detail/parse_size.h"

namespace warpstore::bench {

namespace {

std::string quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos) return arg;
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string join_command_line(const std::string& program, const std::vector<std::string>& args) {
  std::string line = program;
  for (const auto& a : args) {
    line += ' ';  // not " " + quote(a): GCC 12 -O3 warns falsely (-Wrestrict)
    line += quote(a);
  }
  return line;
}

}  // namespace

std::uint64_t parse_size(std::string_view text) {
  try {
    return detail::parse_size(text);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
}

std::string format_size(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  unsigned u = 0;
  double v = static_cast<double>(bytes);
  while (u + 1 < std::size(units) && v >= 1024.0) {
    v /= 1024.0;
    ++u;
  }
  std::ostringstream out;
  if (u == 0 || v == std::floor(v))
    out << static_cast<std::uint64_t>(v) << ' ' << units[u];
  else {
    out.precision(v < 10 ? 2 : 1);
    out << std::fixed << v << ' ' << units[u];
  }
  return out.str();
}

std::vector<std::string> split_list(std::string_view text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

// ---- command_spec -----------------------------------------------------------

command_spec& command_spec::option(std::string name, std::string value_name,
                                   std::string default_value, std::string help) {
  if (find(name)) throw std::logic_error("option --" + name + " declared twice");
  if (value_name.empty()) value_name = "VALUE";
  options_.push_back({std::move(name), std::move(value_name), std::move(default_value), std::move(help)});
  return *this;
}

command_spec& command_spec::flag(std::string name, std::string help) {
  if (find(name)) throw std::logic_error("option --" + name + " declared twice");
  options_.push_back({std::move(name), "", "", std::move(help)});
  return *this;
}

command_spec& command_spec::positional(std::string name, std::string help, bool required) {
  if (required && !positionals_.empty() && !positionals_.back().required)
    throw std::logic_error("required positional " + name + " after an optional one");
  positionals_.push_back({std::move(name), std::move(help), required});
  return *this;
}

const option_spec* command_spec::find(std::string_view name) const {
  for (const auto& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

// ---- parsed_args ------------------------------------------------------------

const std::string& parsed_args::raw(std::string_view name) const {
  const auto it = values_.find(name);
  if (it == values_.end())
    throw std::logic_error("option --" + std::string(name) + " was never declared");
  return it->second;
}

bool parsed_args::given(std::string_view name) const {
  raw(name);
  const auto it = given_.find(name);
  return it != given_.end() && it->second;
}

const std::string& parsed_args::str(std::string_view name) const { return raw(name); }

std::uint64_t parsed_args::size(std::string_view name) const {
  try {
    return parse_size(raw(name));
  } catch (const usage_error& e) {
    throw usage_error("--" + std::string(name) + ": " + e.what());
  }
}

std::uint64_t parsed_args::count(std::string_view name) const { return size(name); }

std::int64_t parsed_args::integer(std::string_view name) const {
  const std::string& v = raw(name);
  std::int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    throw usage_error("--" + std::string(name) + ": '" + v + "' is not an integer");
  return out;
}

double parsed_args::real(std::string_view name) const {
  const std::string& v = raw(name);
  double out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !std::isfinite(out))
    throw usage_error("--" + std::string(name) + ": '" + v + "' is not a number");
  return out;
}

bool parsed_args::flag(std::string_view name) const { return raw(name) == "1"; }

const std::string& parsed_args::choice(std::string_view name,
                                       const std::vector<std::string>& allowed) const {
  const std::string& v = raw(name);
  for (const auto& a : allowed)
    if (a == v) return v;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : "|") + a;
  throw usage_error("--" + std::string(name) + ": '" + v + "' is not one of " + list);
}

std::vector<std::string> parsed_args::list(std::string_view name) const {
  return split_list(raw(name));
}

const std::string& parsed_args::positional(std::string_view name) const {
  const auto it = positionals_.find(name);
  if (it == positionals_.end())
    throw std::logic_error("positional " + std::string(name) + " was never declared");
  return it->second;
}

// ---- arg_parser -------------------------------------------------------------

command_spec& arg_parser::add_command(std::string name, std::string summary) {
  if (find_command(name)) throw std::logic_error("command " + name + " declared twice");
  commands_.emplace_back(std::move(name), std::move(summary));
  return commands_.back();
}

const command_spec* arg_parser::find_command(std::string_view name) const {
  for (const auto& c : commands_)
    if (c.name() == name) return &c;
  return nullptr;
}

parsed_args arg_parser::parse(int argc, const char* const* argv) const {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  parsed_args p = parse(args);
  p.command_line_ = join_command_line(argc > 0 ? quote(argv[0]) : program_, args);
  return p;
}

parsed_args arg_parser::parse(const std::vector<std::string>& args) const {
  parsed_args p;
  p.command_line_ = join_command_line(program_, args);

  std::size_t i = 0;
  const command_spec* cmd = nullptr;
  for (const auto& a : args)
    if (a == "-h" || a == "--help") p.help_ = true;
  if (!commands_.empty()) {
    // The command is the first argument that is not an option.
    if (args.empty() || args[0].rfind("-", 0) == 0) {
      if (p.help_) return p;
      throw usage_error("no command given; one of:" + [&] {
        std::string s;
        for (const auto& c : commands_) s += " " + c.name();
        return s;
      }() + " (see " + program_ + " --help)");
    }
    cmd = find_command(args[0]);
    if (!cmd) throw usage_error("unknown command '" + args[0] + "' (see " + program_ + " --help)");
    p.command_ = cmd->name();
    i = 1;
  }
  if (p.help_) return p;

  const std::string where = cmd ? program_ + " " + cmd->name() : program_;
  auto lookup = [&](std::string_view name) -> const option_spec* {
    if (cmd)
      if (const option_spec* o = cmd->find(name)) return o;
    return common_.find(name);
  };
  auto declare_defaults = [&](const command_spec& spec) {
    for (const auto& o : spec.options()) {
      p.values_[o.name] = o.value_name.empty() ? "0" : o.default_value;
      p.given_[o.name] = false;
    }
  };
  declare_defaults(common_);
  if (cmd) declare_defaults(*cmd);
  const std::vector<positional_spec>& positionals =
      cmd && !cmd->positionals().empty() ? cmd->positionals() : common_.positionals();

  std::size_t next_positional = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string name = a.substr(2);
      std::string value;
      bool inline_value = false;
      if (const auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
        inline_value = true;
      }
      const option_spec* o = lookup(name);
      if (!o) throw usage_error("unknown option --" + name + " (see " + where + " --help)");
      if (o->value_name.empty()) {
        if (inline_value) throw usage_error("--" + name + " is a flag and takes no value");
        value = "1";
      } else if (!inline_value) {
        if (i + 1 >= args.size()) throw usage_error("--" + name + " needs a value " + o->value_name);
        value = args[++i];
      }
      p.values_[o->name] = value;
      p.given_[o->name] = true;
    } else if (a.size() > 1 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1]))) {
      throw usage_error("unknown option " + a + " (options are --name VALUE; see " + where +
                        " --help)");
    } else {
      if (next_positional >= positionals.size())
        throw usage_error("unexpected argument '" + a + "' (see " + where + " --help)");
      p.positionals_[positionals[next_positional++].name] = a;
    }
  }
  for (; next_positional < positionals.size(); ++next_positional) {
    const auto& pos = positionals[next_positional];
    if (pos.required) throw usage_error("missing argument " + pos.name + " (see " + where + " --help)");
    p.positionals_[pos.name] = "";
  }
  return p;
}

std::string arg_parser::help(std::string_view command) const {
  std::ostringstream out;
  const command_spec* cmd = command.empty() ? nullptr : find_command(command);
  auto option_lines = [&](const command_spec& spec, bool with_help) {
    std::vector<std::pair<std::string, std::string>> rows;
    for (const auto& o : spec.options()) {
      std::string right = o.help;
      if (!o.value_name.empty() && !o.default_value.empty())
        right += " [default: " + o.default_value + "]";
      rows.emplace_back("--" + o.name + (o.value_name.empty() ? "" : " " + o.value_name), right);
    }
    if (with_help) rows.emplace_back("-h, --help", "this help");
    std::size_t width = 0;
    for (const auto& row : rows) width = std::max(width, row.first.size());
    for (const auto& [left, right] : rows)
      out << "  " << left << std::string(width - left.size() + 2, ' ') << right << '\n';
  };
  auto positional_usage = [&](const command_spec& spec) {
    std::string s;
    for (const auto& pos : spec.positionals()) s += pos.required ? " " + pos.name : " [" + pos.name + "]";
    return s;
  };
  auto positional_lines = [&](const command_spec& spec) {
    for (const auto& pos : spec.positionals()) out << "  " << pos.name << "  " << pos.help << '\n';
  };

  if (cmd) {
    out << "usage: " << program_ << ' ' << cmd->name() << positional_usage(*cmd)
        << " [options]\n\n" << cmd->summary() << "\n";
    if (!cmd->positionals().empty()) {
      out << "\narguments:\n";
      positional_lines(*cmd);
    }
    out << "\noptions:\n";
    option_lines(*cmd, common_.options().empty());
    if (!common_.options().empty()) {
      out << "\noptions of every command:\n";
      option_lines(common_, true);
    }
    return out.str();
  }
  if (commands_.empty()) {
    out << "usage: " << program_ << positional_usage(common_) << " [options]\n\n" << summary_ << "\n";
    if (!common_.positionals().empty()) {
      out << "\narguments:\n";
      positional_lines(common_);
    }
    out << "\noptions:\n";
    option_lines(common_, true);
    return out.str();
  }
  out << "usage: " << program_ << " COMMAND [options]\n\n" << summary_ << "\n\ncommands:\n";
  std::size_t width = 0;
  for (const auto& c : commands_) width = std::max(width, c.name().size());
  for (const auto& c : commands_)
    out << "  " << c.name() << std::string(width - c.name().size() + 2, ' ') << c.summary() << '\n';
  if (!common_.options().empty()) {
    out << "\noptions of every command:\n";
    option_lines(common_, true);
  }
  out << "\n" << program_ << " COMMAND --help lists the options of COMMAND.\n";
  return out.str();
}

}  // namespace warpstore::bench

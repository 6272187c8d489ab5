// The one argument parser of the benchmarks and tools:
//
//   program [COMMAND] [POSITIONAL...] [--key VALUE | --key=VALUE | --flag]...
//
// Each command declares its options with a default and a help line; options
// declared on common() are accepted by every command. Anything undeclared is
// a usage_error naming it. Sizes and counts take binary suffixes
// (4K = 4096, 64M, 1GiB, 1.5G; K, KB and KiB all mean 1024).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace warpstore::bench {

// A command line the user got wrong; the message says what and where.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "4096", "4K", "4KB", "4KiB", "1.5G", "16GiB" -> bytes (binary units).
// Raises usage_error on anything else, on negatives and on overflow.
std::uint64_t parse_size(std::string_view text);
// "4096 B", "4 KiB", "1.5 GiB": the largest unit that keeps the value >= 1.
std::string format_size(std::uint64_t bytes);
// "a,b,c" -> {"a", "b", "c"}; empty items are dropped.
std::vector<std::string> split_list(std::string_view text, char sep = ',');

struct option_spec {
  std::string name;          // without the leading dashes
  std::string value_name;    // empty for a flag
  std::string default_value; // as text; flags default to off
  std::string help;
};

struct positional_spec {
  std::string name;
  std::string help;
  bool required = true;
};

class command_spec {
 public:
  command_spec() = default;
  command_spec(std::string name, std::string summary)
      : name_(std::move(name)), summary_(std::move(summary)) {}

  // --name VALUE, `value_name` shown in the help ("BYTES", "PATH", ...).
  command_spec& option(std::string name, std::string value_name, std::string default_value,
                       std::string help);
  // --name, off unless given.
  command_spec& flag(std::string name, std::string help);
  // A bare argument, in declaration order.
  command_spec& positional(std::string name, std::string help, bool required = true);

  const std::string& name() const { return name_; }
  const std::string& summary() const { return summary_; }
  const std::vector<option_spec>& options() const { return options_; }
  const std::vector<positional_spec>& positionals() const { return positionals_; }
  const option_spec* find(std::string_view name) const;

 private:
  std::string name_;
  std::string summary_;
  std::vector<option_spec> options_;
  std::vector<positional_spec> positionals_;
};

// What a command line said, with the defaults filled in. Typed getters raise
// usage_error naming the option when its value does not parse, and
// std::logic_error for a name no spec declared (a bug in the caller).
class parsed_args {
 public:
  const std::string& command() const { return command_; }
  // The whole command line, arguments quoted where needed.
  const std::string& command_line() const { return command_line_; }
  bool wants_help() const { return help_; }

  // True when the command (or common()) declared the option.
  bool declared(std::string_view name) const { return values_.find(name) != values_.end(); }
  // True when the option was given on the command line (not defaulted).
  bool given(std::string_view name) const;
  const std::string& str(std::string_view name) const;
  std::uint64_t size(std::string_view name) const;   // parse_size
  std::uint64_t count(std::string_view name) const;  // parse_size, for counts ("1M" threads)
  std::int64_t integer(std::string_view name) const;
  double real(std::string_view name) const;
  bool flag(std::string_view name) const;
  // The value, checked against `allowed`.
  const std::string& choice(std::string_view name, const std::vector<std::string>& allowed) const;
  std::vector<std::string> list(std::string_view name) const;  // split_list
  // A positional argument; "" when an optional one was not given.
  const std::string& positional(std::string_view name) const;

 private:
  friend class arg_parser;
  const std::string& raw(std::string_view name) const;
  std::string command_;
  std::string command_line_;
  bool help_ = false;
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, bool, std::less<>> given_;
  std::map<std::string, std::string, std::less<>> positionals_;
};

class arg_parser {
 public:
  arg_parser(std::string program, std::string summary)
      : program_(std::move(program)), summary_(std::move(summary)) {}

  // Options (and, for a program without commands, positionals) every command takes.
  command_spec& common() { return common_; }
  // Adds a subcommand. A parser without any is a single-command program.
  command_spec& add_command(std::string name, std::string summary);

  // Parses argv (argv[0] is the program). -h / --help anywhere sets wants_help().
  parsed_args parse(int argc, const char* const* argv) const;
  parsed_args parse(const std::vector<std::string>& args) const;  // without argv[0]

  // Usage for the whole program, or for one command ("" = program).
  std::string help(std::string_view command = {}) const;

 private:
  const command_spec* find_command(std::string_view name) const;
  std::string program_;
  std::string summary_;
  command_spec common_;
  std::vector<command_spec> commands_;
};

}  // namespace warpstore::bench

#include "support/setting_options.h"

#include <algorithm>
#include <stdexcept>

namespace warpstore::bench {

namespace {
const char* value_name(const setting& s) {
  switch (s.type) {
    case setting_type::size: return "BYTES";
    case setting_type::milliseconds: return "MS";
    case setting_type::flag: return "0|1";
    case setting_type::choice: return s.choices;
    default: return "N";
  }
}
}  // namespace

void declare_options(command_spec& cmd, std::initializer_list<setting_option> settings) {
  const options env = options::from_environment();
  for (const setting_option& o : settings) {
    const setting* s = find_setting(o.setting);
    if (s == nullptr) throw std::logic_error("no setting " + std::string(o.setting));
    std::string help = o.help;
    if (help.empty()) {
      help = s->doc;
      help.resize(std::min(help.size(), help.find("; ")));
    }
    cmd.option(s->flag, value_name(*s), o.default_value.empty() ? s->text(env) : o.default_value,
               help + " (" + s->variable + ")");
  }
}

options apply_options(const parsed_args& args, options base) {
  for (const setting& s : settings_table()) {
    if (!args.declared(s.flag)) continue;
    try {
      s.apply(base, args.str(s.flag), std::string("--") + s.flag);
    } catch (const std::invalid_argument& e) {
      throw usage_error(e.what());
    }
  }
  return base;
}

}  // namespace warpstore::bench

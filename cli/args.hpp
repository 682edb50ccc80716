// args: the command line of every subcommand, parsed with CLI11 — `--opt value` and `--opt=value`, `-h` /
// `--help` per subcommand (exit 0), "did you mean" for unknown options and subcommands, and a short usage line
// (not the whole manual) on a usage error. The help text is one table (kHelp); a subcommand's help is its
// section of it.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tp {

// A usage error (exit 2): the message, then the subcommand's usage line.
struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// --help was given and printed (exit 0).
struct HelpShown {};

struct Args {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options;  // --name value ("" for flags), as given
  bool flag(const std::string& n) const;
  std::string value(const std::string& n, const std::string& dflt = "") const;
};

extern const char* const kHelp;
extern const std::vector<std::string> kCommands;

// Parses argv[from..] of subcommand argv[from - 1] with the given valued options and flags (long names,
// "--json"). Throws HelpShown after printing the subcommand's help, Usage on a bad command line, InputError
// (exit 2, before any work) when an output file (--json, --trace, --csv, --out) or folder (--emit) is "" or cannot be
// written there; any other option given with an empty value is a Usage error (never its default).
Args parse_args(int argc, char** argv, int from, const std::vector<std::string>& valued,
                const std::vector<std::string>& flags);

// An output folder (plan --emit): not "" nor "-", created when missing, and a file can be created in it; else
// InputError (exit 2) with the reason. parse_args checks --emit with it.
void check_output_dir(const std::string& opt, const std::string& dir);

// A whole number from lo to hi given to option `opt`: "2.5", "1e30", "-1", "", "4x" and anything outside the
// range are a Usage error naming the option and the range ("OPT expects a whole number from LO to HI, got V"),
// never truncated or wrapped. The one parser of every integer option.
long long parse_count(const std::string& opt, const std::string& text, long long lo, long long hi);
// The same for an option of `a`: `dflt` when it was not given.
long long count_option(const Args& a, const std::string& opt, long long lo, long long hi, long long dflt);

// The help section of a subcommand (its usage lines and description from kHelp); "" when unknown.
std::string command_help(const std::string& cmd);
// The first usage line(s) of a subcommand, for usage errors.
std::string command_usage(const std::string& cmd);
// "; did you mean \"x\"?" for the closest of `known` to `word`, "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known);

}  // namespace tp

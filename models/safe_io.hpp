// safe_io: reading user files without hanging or exhausting memory, and writing outputs all-or-nothing.
// Inputs: anything that is not a regular file (FIFO, device, socket, directory) is refused before it is opened
// for reading, and reads are capped. Outputs: every file goes to a fresh temporary in its own directory
// (mkstemp: O_CREAT|O_EXCL, so never through a symlink planted at the temporary's name), and the temporaries
// are renamed into place only once all of them are written; a target that is not a regular file (/dev/null,
// a FIFO with a reader) and standard output are written directly, never renamed over, and before any rename, so
// that their failure leaves every file as it was. A replaced target is kept as a hard link until every rename
// succeeded: when one fails, the earlier ones are put back (or the message names those that could not be).
// Errors throw InputError (exit 2) saying why; a failed standard output throws StdoutError (exit 1).
#pragma once
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tp {

constexpr size_t kMaxJsonBytes = size_t{64} << 20;  // scenarios, specs, profiles, catalogs

// What a path is, in words: "a FIFO", "a character device", "a directory", ... ("" for a regular file).
std::string file_kind_of(const std::string& path);
// Throws InputError("<path>: <what> is a FIFO ...") unless path names (after symlinks) an existing regular file.
void require_regular_file(const std::string& path, const std::string& what);
// The whole file, at most max_bytes; refuses non-regular files before opening and larger files with a message.
std::string read_file_capped(const std::string& path, size_t max_bytes, const std::string& what);

// One output: bytes from one or more parts ("-" as path: standard output).
struct OutputFile {
  std::string path;
  std::vector<std::span<const unsigned char>> parts;
  OutputFile(std::string p, std::string_view text);
  OutputFile(std::string p, std::vector<std::span<const unsigned char>> parts);
};

// A write to standard output failed (a full disk, a closed pipe): exit 1, the output is lost.
struct StdoutError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Flushes standard output (std::cout and stdio) and throws StdoutError when anything written to it was lost.
void check_stdout();

// Writes every file or none: all temporaries first (fsync'ed when sync), then the direct targets and standard
// output, then all renames (and the directories fsync'ed when sync). On any failure the temporaries are removed,
// replaced targets restored, and InputError says which file and why.
void write_outputs_atomic(const std::vector<OutputFile>& files, bool sync = false);

}  // namespace tp

// safe_io: reading user files without hanging or exhausting memory, and writing outputs all-or-nothing.
// Inputs: anything that is not a regular file (FIFO, device, socket, directory) is refused before it is opened
// for reading, and reads are capped. Outputs: every file goes to a fresh temporary in its own directory
// (mkstemp: O_CREAT|O_EXCL, so never through a symlink planted at the temporary's name), and the temporaries
// are renamed into place only once all of them are written; a target that is not a regular file (/dev/null,
// a FIFO with a reader) is written directly, never renamed over. Errors throw InputError (exit 2) saying why.
#pragma once
#include <cstddef>
#include <span>
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

// Writes every file or none: all temporaries first (fsync'ed when sync), then all renames (and the directories
// fsync'ed when sync). On any failure the temporaries are removed and InputError says which file and why.
void write_outputs_atomic(const std::vector<OutputFile>& files, bool sync = false);

}  // namespace tp

// safe_io: capped reads of regular files only, and all-or-nothing atomic writes (see safe_io.hpp).
#include "models/safe_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "models/json_check.hpp"

namespace tp {

namespace fs = std::filesystem;

namespace {

std::string kind_of_mode(mode_t m) {
  if (S_ISREG(m)) return "";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void refuse(const std::string& msg) { throw InputError({msg}); }

std::string errno_text() { return std::strerror(errno); }

// "64 MiB" for a whole number of MiB, else the exact bytes too: "67108865 bytes (64.0 MiB)", so that a file one
// byte over the limit never reads as "64 MiB; the limit is 64 MiB".
std::string mib(size_t bytes) {
  if (bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu bytes (%.1f MiB)", bytes, (double)bytes / (1 << 20));
  return buf;
}

// A path from JSON may hold "\u0000"; the system calls would read it only up to there.
void refuse_nul(const std::string& path, const std::string& what) {
  if (path.find('\0') != std::string::npos) {
    std::string m = "\"";  // appended, not "\"" + string: g++ 12 warns -Wstringop-overflow falsely on that form
    m += path.substr(0, path.find('\0'));
    m += "\\u0000...\": " + what + " path contains a NUL character (\\u0000); expected a file name";
    refuse(m);
  }
}

// Writes n bytes to fd; false with errno set on failure.
bool write_fully(int fd, const unsigned char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

mode_t default_file_mode() {
  const mode_t um = ::umask(0);
  ::umask(um);
  return 0666 & ~um;
}

std::string dir_of(const std::string& path) {
  std::string d = fs::path(path).parent_path().string();
  return d.empty() ? std::string(".") : d;
}

// One output in flight: a temporary to rename, or a descriptor of a non-regular target to write directly.
struct Pending {
  const OutputFile* file;
  std::string tmp;  // empty: direct write to fd (or standard output when path is "-")
  int fd = -1;
};

void cleanup(std::vector<Pending>& ps) {
  for (Pending& p : ps) {
    if (!p.tmp.empty()) ::unlink(p.tmp.c_str());
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
  }
}

// Opens a target that exists and is not a regular file, without blocking (a FIFO with no reader is refused).
int open_direct(const std::string& path, mode_t m) {
  if (!S_ISCHR(m) && !S_ISFIFO(m))
    refuse("cannot write " + path + ": it is " + kind_of_mode(m) + ", not a regular file");
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENXIO) refuse("cannot write " + path + ": it is a FIFO with no reader");
    refuse("cannot write " + path + ": " + errno_text());
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

// Creates, fills and closes a fresh temporary next to path; returns its name.
std::string write_temporary(const OutputFile& f, bool sync, mode_t mode) {
  std::string name = ".";  // appended, not "." + string: g++ 12 warns -Wrestrict falsely on that form
  name += fs::path(f.path).filename().string();
  name += ".tmp-XXXXXX";
  std::string tmpl = (fs::path(dir_of(f.path)) / name).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const int fd = ::mkostemp(buf.data(), O_CLOEXEC);  // O_CREAT | O_EXCL: never opens an existing name or symlink
  if (fd < 0) refuse("cannot write " + f.path + ": " + errno_text());
  const std::string tmp(buf.data());
  (void)::fchmod(fd, mode);  // mkstemp makes 0600; outputs get the usual umask-derived mode
  bool ok = true;
  for (const auto& part : f.parts) ok = ok && write_fully(fd, part.data(), part.size());
  if (ok && sync) ok = ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  errno = err;
  if (!ok) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    refuse("cannot write " + f.path + ": " + why);
  }
  return tmp;
}

}  // namespace

OutputFile::OutputFile(std::string p, std::string_view text)
    : path(std::move(p)), parts{{reinterpret_cast<const unsigned char*>(text.data()), text.size()}} {}
OutputFile::OutputFile(std::string p, std::vector<std::span<const unsigned char>> ps)
    : path(std::move(p)), parts(std::move(ps)) {}

std::string file_kind_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return kind_of_mode(st.st_mode);
}

void require_regular_file(const std::string& path, const std::string& what) {
  refuse_nul(path, what);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) refuse(path + ": cannot open " + what + ": " + errno_text());
  if (!S_ISREG(st.st_mode)) refuse(path + ": " + what + " is " + kind_of_mode(st.st_mode) + "; expected a regular file");
}

std::string read_file_capped(const std::string& path, size_t max_bytes, const std::string& what) {
  require_regular_file(path, what);
  // O_NONBLOCK: should the path have become a FIFO since the check, open() still returns at once.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) refuse(path + ": cannot read " + what + ": " + errno_text());
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(path + ": " + what + " is not a regular file");
  }
  if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
    ::close(fd);
    refuse(path + ": " + what + " is " + mib(static_cast<size_t>(st.st_size)) + "; the limit is " + mib(max_bytes));
  }
  std::string text;
  text.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  for (;;) {  // the file may grow while read: read at most max_bytes + 1 bytes
    if (got == text.size()) text.resize(std::min(max_bytes + 1, std::max<size_t>(got * 2, 4096)));
    if (got == text.size()) break;
    const ssize_t k = ::read(fd, text.data() + got, text.size() - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const std::string why = errno_text();
      ::close(fd);
      refuse(path + ": cannot read " + what + ": " + why);
    }
    if (k == 0) break;
    got += static_cast<size_t>(k);
  }
  ::close(fd);
  if (got > max_bytes) refuse(path + ": " + what + " is larger than the limit of " + mib(max_bytes));
  text.resize(got);
  return text;
}

namespace {

// Writes the outputs that cannot be renamed into place: standard output ("-") and non-regular targets. Throws
// (nothing renamed yet) on the first failure: InputError for a file, StdoutError (exit 1) for standard output.
void write_direct(std::vector<Pending>& ps) {
  for (Pending& p : ps) {
    if (!p.tmp.empty()) continue;
    if (p.fd < 0) {  // "-": standard output, after what is buffered there, checked now (a full stdout was exit 0)
      check_stdout();
      bool ok = true;
      for (const auto& part : p.file->parts) ok = ok && write_fully(STDOUT_FILENO, part.data(), part.size());
      if (!ok) throw StdoutError("cannot write standard output: " + errno_text());
      continue;
    }
    bool ok = true;
    for (const auto& part : p.file->parts) ok = ok && write_fully(p.fd, part.data(), part.size());
    const std::string why = ok ? "" : errno_text();
    ::close(p.fd);
    p.fd = -1;
    if (!ok) refuse("cannot write " + p.file->path + ": " + why);
  }
}

// A hard link to the target's current file, so that a later failed rename can put it back; "" when there is no
// target or it cannot be linked (then it cannot be restored, and a failure says so).
std::string backup_of(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return "";
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = ".";
    name += fs::path(path).filename().string();
    name += ".old-XXXXXX";
    std::string tmpl = (fs::path(dir_of(path)) / name).string();
    const int fd = ::mkstemp(tmpl.data());  // reserves a fresh name, then hands it to link()
    if (fd < 0) return "";
    ::close(fd);
    ::unlink(tmpl.c_str());
    if (::link(path.c_str(), tmpl.c_str()) == 0) return tmpl;
    if (errno != EEXIST) return "";
  }
  return "";
}

struct Renamed {
  std::string path, backup;  // backup "": the target did not exist (or could not be kept)
  bool existed = false;
};

// Puts back what the renames in `done` replaced; returns the outputs that stay replaced ("" when none).
std::string undo_renames(const std::vector<Renamed>& done) {
  std::string left;
  for (auto it = done.rbegin(); it != done.rend(); ++it) {
    bool ok = !it->backup.empty() ? std::rename(it->backup.c_str(), it->path.c_str()) == 0
                                  : !it->existed && ::unlink(it->path.c_str()) == 0;
    if (!ok) left += (left.empty() ? "" : ", ") + it->path;
  }
  return left;
}

}  // namespace

void check_stdout() {
  errno = 0;
  std::cout.flush();
  const bool ok = std::cout.good() && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (!ok) throw StdoutError("cannot write standard output" + (errno ? ": " + errno_text() : std::string()));
}

void write_outputs_atomic(const std::vector<OutputFile>& files, bool sync) {
  std::vector<Pending> ps;
  const mode_t mode = default_file_mode();
  try {
    for (const OutputFile& f : files) {
      if (f.path.empty()) refuse("cannot write an output with an empty file name");
      refuse_nul(f.path, "output");
      if (f.path == "-") { ps.push_back({&f, "", -1}); continue; }
      struct stat st;
      if (::stat(f.path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        ps.push_back({&f, "", open_direct(f.path, st.st_mode)});
        continue;
      }
      ps.push_back({&f, "", -1});
      ps.back().tmp = write_temporary(f, sync, mode);
    }
    write_direct(ps);  // devices, FIFOs, standard output: before any rename, so a failure leaves every file as it was
  } catch (...) {
    cleanup(ps);
    throw;
  }
  // Every byte is written: only renames remain. Each replaced target is kept as a hard link until all renames
  // succeeded, so that a failed rename (an immutable target) puts the earlier ones back.
  std::vector<Renamed> done;
  for (Pending& p : ps) {
    if (p.tmp.empty()) continue;
    struct stat st;
    Renamed r{p.file->path, "", ::lstat(p.file->path.c_str(), &st) == 0};
    if (r.existed) r.backup = backup_of(r.path);
    if (std::rename(p.tmp.c_str(), r.path.c_str()) != 0) {
      const std::string why = errno_text();
      if (!r.backup.empty()) ::unlink(r.backup.c_str());
      cleanup(ps);
      const std::string left = undo_renames(done);  // a backup it could not put back stays, beside its target
      refuse("cannot write " + r.path + ": " + why +
             (left.empty() ? "; no output was changed" : "; these outputs were replaced and could not be restored: " + left));
    }
    p.tmp.clear();
    done.push_back(r);
    if (sync) {  // make the rename itself durable
      const int dfd = ::open(dir_of(r.path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
      }
    }
  }
  for (const Renamed& d : done)
    if (!d.backup.empty()) ::unlink(d.backup.c_str());
}

}  // namespace tp

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

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

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

void write_outputs_atomic(const std::vector<OutputFile>& files, bool sync) {
  std::vector<Pending> ps;
  const mode_t mode = default_file_mode();
  try {
    for (const OutputFile& f : files) {
      if (f.path.empty()) refuse("cannot write an output with an empty file name");
      if (f.path == "-") { ps.push_back({&f, "", -1}); continue; }
      struct stat st;
      if (::stat(f.path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        ps.push_back({&f, "", open_direct(f.path, st.st_mode)});
        continue;
      }
      ps.push_back({&f, "", -1});
      ps.back().tmp = write_temporary(f, sync, mode);
    }
  } catch (...) {
    cleanup(ps);
    throw;
  }
  for (Pending& p : ps) {  // everything is written: only renames (which do not fail for want of space) remain
    if (p.tmp.empty()) continue;
    if (std::rename(p.tmp.c_str(), p.file->path.c_str()) != 0) {
      const std::string why = errno_text();
      cleanup(ps);
      refuse("cannot write " + p.file->path + ": " + why);
    }
    p.tmp.clear();
    if (sync) {  // make the rename itself durable
      const int dfd = ::open(dir_of(p.file->path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
      }
    }
  }
  std::string failed;
  for (Pending& p : ps) {
    if (!p.tmp.empty() || (p.fd < 0 && p.file->path != "-")) continue;
    if (p.fd < 0) {
      for (const auto& part : p.file->parts) std::cout.write(reinterpret_cast<const char*>(part.data()), part.size());
      std::cout.flush();
      continue;
    }
    bool ok = true;
    for (const auto& part : p.file->parts) ok = ok && write_fully(p.fd, part.data(), part.size());
    if (!ok && failed.empty()) failed = "cannot write " + p.file->path + ": " + errno_text();
    ::close(p.fd);
    p.fd = -1;
  }
  if (!failed.empty()) refuse(failed);
}

}  // namespace tp

// temp_dir: a fresh, empty directory under the system temp dir for one test, removed when the object goes out
// of scope. Names carry the process id and a counter, so parallel test processes never share one.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace tp::testutil {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "tp_test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace tp::testutil

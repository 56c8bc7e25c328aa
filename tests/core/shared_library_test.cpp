// core/shared_library.h: a C library opened on first use, its functions by their own declarations.
#include "qkv/core/shared_library.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

#include "qkv/core/error.h"

namespace qkv {
namespace {

TEST(SharedLibrary, CallsAFunctionByItsOwnDeclaration) {
  // zlib, opened by its soname: the same answer as the linked call
  const SharedLibrary z("zlib", {"libqkv-no-such-library.so.0", "libz.so.1"}, "apt-get install zlib1g");
  EXPECT_EQ(z.name(), "libz.so.1");  // the first name that loads
  const auto version = z.function<decltype(&::zlibVersion)>("zlibVersion");
  EXPECT_EQ(std::string(version()), std::string(zlibVersion()));
  decltype(&::crc32) crc = nullptr;
  z.bind(crc, "crc32");
  const unsigned char abc[] = {'a', 'b', 'c'};
  EXPECT_EQ(crc(0, abc, 3), 0x352441c2u);  // CRC-32 of "abc"
}

TEST(SharedLibrary, AMissingLibraryIsAnErrorNamingItAndHowToInstallIt) {
  try {
    const SharedLibrary lib("the picture library", {"libqkv-no-such-library.so.0", "libqkv-nor-this.so.1"},
                            "apt-get install something");
    FAIL() << "opened a library that does not exist";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot open the picture library"), std::string::npos) << m;
    EXPECT_NE(m.find("libqkv-no-such-library.so.0, libqkv-nor-this.so.1"), std::string::npos) << m;
    EXPECT_NE(m.find("libqkv-nor-this.so.1: cannot open shared object file"), std::string::npos) << m;
    EXPECT_NE(m.find("apt-get install something"), std::string::npos) << m;
  }
}

TEST(SharedLibrary, AMissingFunctionIsAnErrorNamingIt) {
  const SharedLibrary z("zlib", {"libz.so.1"}, "apt-get install zlib1g");
  try {
    z.function<void (*)()>("qkv_no_such_function");
    FAIL() << "found a function zlib does not have";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("zlib (libz.so.1) has no qkv_no_such_function"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace qkv

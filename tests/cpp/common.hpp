// Helpers shared by the suites: a scratch tickwire directory per test.
#ifndef TICKWIRE_TESTS_COMMON_HPP
#define TICKWIRE_TESTS_COMMON_HPP

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "tickwire.hpp"

// A fresh tickwire directory under TICKWIRE_TEST_DIR (crates/ffi/tests/cpp.rs
// sets it) or the temp dir, removed afterwards.
class Scratch : public ::testing::Test {
  protected:
    void SetUp() override {
        const char* base = getenv("TICKWIRE_TEST_DIR");
        std::filesystem::path root = base != nullptr ? base : std::filesystem::temp_directory_path().string();
        std::filesystem::create_directories(root);
        std::string tmpl = (root / "tw-cpp-XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    const std::string& dir() const { return dir_; }

  private:
    std::string dir_;
};

// Runs `expr`, expecting a tw::Error with status `want`.
#define EXPECT_TW_ERROR(expr, want)                                                              \
    do {                                                                                         \
        try {                                                                                    \
            (void)(expr);                                                                        \
            ADD_FAILURE() << #expr << " did not throw";                                          \
        } catch (const tw::Error& e) {                                                           \
            EXPECT_EQ(e.code(), (want)) << #expr << ": " << e.what();                            \
            EXPECT_NE(std::string(e.what()).find(tw::status_name(want)), std::string::npos)      \
                << e.what();                                                                     \
        }                                                                                        \
    } while (0)

#endif

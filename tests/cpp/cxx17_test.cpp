// include/tickwire.hpp compiled as C++17: tw::bytes is the header's own
// span-like view, not std::span.
#include <array>
#include <string>
#include <vector>

#include "common.hpp"

static_assert(__cplusplus < 202002L, "this suite is built as C++17");

using Cxx17 = Scratch;

TEST_F(Cxx17, ChannelPubSubWithTheOwnBytesView) {
    auto ctx = tw::Context::open(dir());
    auto pub = ctx.publication("ipc:cpp17", 1);
    auto sub = ctx.subscription("ipc:cpp17", 1);
    std::vector<std::uint8_t> v{1, 2, 3};
    std::array<std::uint8_t, 2> a{{4, 5}};
    ASSERT_TRUE(pub.offer("t/v", v));
    ASSERT_TRUE(pub.offer("t/a", tw::bytes(a)));
    ASSERT_TRUE(pub.offer(std::string("text")));
    std::vector<std::string> got;
    for (int i = 0; i < 1000 && got.size() < 3; i++) {
        sub.poll([&](const tw::Event& e) {
            if (e.is_message()) {
                std::string s(e.topic());
                s += ':';
                for (std::uint8_t b : e.payload()) {
                    s += std::to_string(b);
                }
                got.push_back(s);
            }
        });
    }
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0], "t/v:123");
    EXPECT_EQ(got[1], "t/a:45");
    EXPECT_EQ(got[2], ":116101120116");
    std::array<std::uint8_t, 1> small{};
    ASSERT_TRUE(pub.offer("t", "too long"));
    try {
        (void)sub.receive(small, std::chrono::seconds(1));
        ADD_FAILURE() << "no BufferTooSmall";
    } catch (const tw::BufferTooSmall& e) {
        EXPECT_EQ(e.needed(), 8u);
    }
}

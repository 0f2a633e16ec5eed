// serve/server: the HTTP server's life cycle. A server that is stopped at once after start()
// (a model folder that fails to load, as `attn serve` does when its options cannot be served)
// must stop: httplib's stop() is a no-op until the listening loop has begun, so start() waits
// for it. Tried many times in a row, each with a deadline, so that the race shows if it returns.
#include "attn/serve/server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "attn/core/error.h"

namespace attn::serve {
namespace {

using namespace std::chrono_literals;

// Runs f on a thread of its own and fails (instead of hanging the test binary) if it has not
// returned within the deadline.
template <class F>
void within(std::chrono::seconds deadline, F f) {
  auto task = std::make_shared<std::packaged_task<void()>>(f);
  std::future<void> done = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  ASSERT_EQ(done.wait_for(deadline), std::future_status::ready) << "the server did not stop within the deadline";
  done.get();
}

ServerOptions options_for(const std::string& dir) {
  ServerOptions o;
  o.model_dir = dir;
  o.port = 0;
  return o;
}

TEST(Server, StopsRightAfterStartWhenTheModelFailsToLoad) {
  within(60s, [] {
    for (int i = 0; i < 200; ++i) {
      Server server(options_for("no/such/model/folder"));
      EXPECT_GT(server.start(), 0);
      EXPECT_THROW(server.load(), Error);
    }  // ~Server stops the listening loop
  });
}

TEST(Server, ShutdownRightAfterStartReturns) {
  within(60s, [] {
    for (int i = 0; i < 200; ++i) {
      Server server(options_for("no/such/model/folder"));
      EXPECT_GT(server.start(), 0);
      server.shutdown(0ms);
    }
  });
}

TEST(Server, AnUnknownFolderIsAnErrorNamingIt) {
  Server server(options_for("no/such/model/folder"));
  server.start();
  try {
    server.load();
    FAIL() << "load() of a missing folder succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/model/folder"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attn::serve

// Hosts that join a running async job (implementation): the port file, the requests and answers in <run.dir>/join/,
// and the accept or connect that follows.
#include "train/async/join.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/host_collectives.h"
#include "parallel/job_port.h"
#include "train/run_state.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

// Keys a joining start may set otherwise than the job: how it is started and how many cores its box has.
const std::vector<std::string> kOwnKeys = {"async.join", "checkpoint.resume", "checkpoint.init_from",
                                           "training.threads"};

std::string join_dir(const RunConfig& c) { return c.run.dir + "/join"; }

// A request older than this without a new beat is from a start that stopped waiting.
constexpr double kStaleSeconds = 10.0;

nlohmann::json read_json(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  try {
    return try_parse_json_input(read_small_file(path, 1 << 20, "join file", "")).value_or(nullptr);
  } catch (const std::exception&) {
    return nullptr;  // written by rename, so whole: unreadable only when it went away meanwhile
  }
}

void write_json(const std::string& path, const nlohmann::json& j) {
  write_file_atomically(path, j.dump(), "join file", "check that the run folder is writable from every host");
}

// A joining start's beat, renewed once a second in a file of its own beside its request (0: none yet).
uint64_t beat_of(const std::string& path) {
  const nlohmann::json j = read_json(path);
  return json_field_or<uint64_t>(j, "beat", 0);
}

}  // namespace

JoinDesk::JoinDesk(const RunConfig& c, const std::string& config_ini, bool spans_hosts)
    : dir_(join_dir(c)), port_(open_job_port()), config_ini_(config_ini), spans_hosts_(spans_hosts) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  // Requests and answers of earlier starts: whoever waited on them has given up.
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) fs::remove(e.path(), ec);
  write_json(dir_ + "/port", {{"port", port_}});
}

JoinDesk::~JoinDesk() {
  std::error_code ec;
  fs::remove(dir_ + "/port", ec);
  close_job_port(port_);
}

bool JoinDesk::poll(int ranks_per_worker) {
  if (!pending_.empty()) return true;
  const double now = now_seconds();
  if (now - last_poll_ < 1.0) return false;
  last_poll_ = now;
  std::error_code ec;
  std::vector<std::string> stems;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec))
    if (e.path().extension() == ".request") stems.push_back(e.path().stem().string());
  std::sort(stems.begin(), stems.end());
  for (const std::string& stem : stems) {
    const std::string path = dir_ + "/" + stem + ".request", beat_path = dir_ + "/" + stem + ".beat";
    const uint64_t beat = beat_of(beat_path);
    auto [it, fresh] = beats_.try_emplace(stem, std::make_pair(beat, now));
    if (fresh) continue;  // alive only once its beat moves
    if (it->second.first == beat) {
      if (now - it->second.second > kStaleSeconds) {
        fs::remove(path, ec);
        fs::remove(beat_path, ec);
        beats_.erase(it);
      }
      continue;
    }
    it->second = {beat, now};
    const nlohmann::json r = read_json(path);
    if (!r.is_object()) continue;
    const std::string host = json_field_or<std::string>(r, "host", "?");
    const int ranks = json_field_or<int>(r, "ranks", 0);
    std::string error, hint;
    const auto [theirs, mine] =
        first_config_difference(json_field_or<std::string>(r, "config", ""), config_ini_, kOwnKeys);
    if (spans_hosts_) {
      error =
          "the job refused to take this start in: one mpirun started the job's ranks on several hosts, and Open "
          "MPI cannot connect another launch to such a job (the joining mpirun crashes)";
      hint =
          "for a job that hosts join, start it with one mpirun on one host (the center and that host's workers) "
          "and every other host with an mpirun of its own and async.join = true (docs/cluster.md)";
    } else if (!theirs.empty()) {
      error =
          "the job refused to take this start in: its config differs (" + theirs + " here, " + mine + " in the job)";
      hint =
          "start the joining ranks with the job's config file and overrides (only " + kOwnKeys.back() + " may differ)";
    } else if (ranks < 1 || ranks % ranks_per_worker != 0) {
      error = "the job refused to take this start in: its " + std::to_string(ranks) +
              " rank(s) are not whole workers of async.ranks_per_worker = " + std::to_string(ranks_per_worker);
      hint = "start a multiple of " + std::to_string(ranks_per_worker) + " ranks on the joining host";
    }
    if (!error.empty()) {
      log_warn("async center: a start on %s asked to join and was refused: %s", host.c_str(), error.c_str());
      write_json(dir_ + "/" + stem + ".answer", {{"state", "refused"}, {"error", error}, {"hint", hint}});
      fs::remove(path, ec);
      fs::remove(beat_path, ec);
      beats_.erase(stem);
      continue;
    }
    write_json(dir_ + "/" + stem + ".answer", {{"state", "seen"}});
    log_info("async center: %d rank(s) on %s ask to join; they are taken in at the next barrier, after a checkpoint",
             ranks, host.c_str());
    pending_ = stem;
    pending_host_ = host;
    return true;
  }
  return false;
}

std::optional<World> JoinDesk::accept(const World& members, const std::string& checkpoint, double seconds) {
  const std::string stem = pending_;
  pending_.clear();
  // The joining start beats once a second while it waits: take it in only while it still does.
  const uint64_t before = beats_[stem].first;
  bool alive = false;
  for (double t0 = now_seconds(); !alive && now_seconds() - t0 < 3.0; usleep(100000))
    alive = beat_of(dir_ + "/" + stem + ".beat") != before;
  beats_.erase(stem);
  uint64_t go = alive ? 1 : 0;
  if (!alive)
    log_warn("async center: the start on %s that asked to join stopped waiting; the run goes on without it",
             pending_host_.c_str());
  else
    write_json(dir_ + "/" + stem + ".answer", {{"state", "accepted"}, {"checkpoint", checkpoint}});
  broadcast_values(members, &go, 1, 0);
  if (go == 0) return std::nullopt;
  return accept_joiners(members, port_, seconds);
}

std::optional<World> accept_joiners_as_member(const World& members, double seconds) {
  uint64_t go = 0;
  broadcast_values(members, &go, 1, 0);
  if (go == 0) return std::nullopt;
  return accept_joiners(members, "", seconds);
}

World join_running_job(const World& world, const RunConfig& c, const std::string& config_ini, std::string& checkpoint) {
  const std::string dir = join_dir(c), where = "run.dir = " + c.run.dir;
  // Rank 0 asks and waits; its answer reaches the others as {error, hint, port, checkpoint}.
  std::vector<std::string> answer(4);
  const double seen_bound = c.async.center_timeout;
  const double accept_bound = c.async.center_timeout + c.async.worker_timeout + c.dist.timeout;
  if (world.rank == 0) {
    const nlohmann::json port = read_json(dir + "/port");
    const std::string state = read_run_state(c.run.dir).state;
    const std::string stem = world.host + "-" + std::to_string(getpid());
    const std::string request = dir + "/" + stem + ".request", reply = dir + "/" + stem + ".answer",
                      beat_file = dir + "/" + stem + ".beat";
    std::error_code ec;
    auto refuse = [&](std::string error, std::string hint) {
      fs::remove(request, ec);
      fs::remove(beat_file, ec);
      answer[0] = "async.join: " + std::move(error);
      answer[1] = std::move(hint);
    };
    if (!port.is_object() || !port.contains("port")) {
      refuse("no async job runs in " + where + " (it has no " + dir + "/port)",
             "start the job first (training.mode = async), and give this start the job's run.dir on the shared "
             "file system");
    } else if (!state.empty() && state != "running") {  // none yet: the job may be starting
      refuse("the job in " + where + " is not running (its run state is '" + (state.empty() ? "none" : state) + "')",
             "resume it (--resume auto), then join");
    } else {
      answer[2] = port["port"].get<std::string>();
      const double start = now_seconds();
      bool seen = false, running = state == "running";
      log_info("async.join: asking the job in %s to take in %d rank(s)", c.run.dir.c_str(), world.size);
      // The request once (its config is a kilobyte or more), then a beat of its own once a second.
      write_json(request, {{"host", world.host}, {"ranks", world.size}, {"config", config_ini}});
      for (uint64_t beat = 1;; ++beat) {
        write_json(beat_file, {{"beat", beat}});
        const nlohmann::json a = read_json(reply);
        const std::string s = json_field_or<std::string>(a, "state", "");
        if (s == "refused") {
          refuse(json_field_or<std::string>(a, "error", ""), json_field_or<std::string>(a, "hint", ""));
          break;
        }
        if (s == "accepted") {
          answer[3] = json_field_or<std::string>(a, "checkpoint", "");
          fs::remove(request, ec);
          fs::remove(beat_file, ec);
          break;
        }
        if (s == "seen" && !seen) {
          seen = true;
          log_info("async.join: the center saw the request; waiting for its next barrier and checkpoint");
        }
        const double waited = now_seconds() - start;
        if (!seen && waited > seen_bound) {
          refuse("the job in " + where +
                     " did not answer within async.center_timeout = " + std::to_string(int(seen_bound)) + " s",
                 "its center may be gone although its run state says running; check the job's log");
          break;
        }
        if (seen && waited > accept_bound) {
          refuse("the job saw the request but did not take this start in within " + std::to_string(int(accept_bound)) +
                     " s (center_timeout + worker_timeout + dist.timeout)",
                 "check the job's log for its barrier");
          break;
        }
        const std::string now = read_run_state(c.run.dir).state;
        running = running || now == "running";
        if (running && now != "running") {
          refuse("the job in " + where + " ended before taking this start in (its run state is now '" +
                     (now.empty() ? "none" : now) + "')",
                 "resume it (--resume auto), then join");
          break;
        }
        sleep(1);
      }
      fs::remove(reply, ec);
    }
  }
  // The other ranks wait in the broadcast for as long as rank 0 may wait for the answer.
  world.watch->timeout_seconds = seen_bound + accept_bound + c.dist.timeout;
  for (std::string& s : answer) s = broadcast_string(world, s, 0);
  world.watch->timeout_seconds = c.dist.timeout;
  if (!answer[0].empty()) throw_error(answer[0], answer[1]);
  checkpoint = answer[3];
  return connect_to_job(world, answer[2], c.dist.timeout);
}

}  // namespace ember

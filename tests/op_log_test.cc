// OpLog: the replication log ring in shared memory, as its writer and its
// readers see it, and as a reader sees it when someone else wrote into it.
#include "ha/op_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "harness.h"
#include "shm_region.h"

namespace maru {
namespace {

using maru_test::ShmRegion;

std::string Payload(uint64_t seq, size_t len) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>(seq * 31 + i);
  return s;
}

OpLog Attach(const ShmRegion &r, Coherence c = Coherence::kHw) {
  Result<OpLog> log = OpLog::Attach(r.base(), r.bytes(), c);
  EXPECT_TRUE(log.ok()) << log.status().ToString();
  return std::move(*log);
}

// Reads every record after `at`, checking each against Payload(); returns
// the last position read.
OpLogPosition ReadAll(const OpLog &log, OpLogPosition at, size_t len) {
  for (;;) {
    Result<OpLogRecord> r = log.ReadNext(at);
    if (!r.ok()) {
      EXPECT_EQ(r.status().errnum(), ENODATA) << r.status().ToString();
      return at;
    }
    EXPECT_EQ(r->seq, at.seq + 1);
    EXPECT_EQ(r->data, Payload(r->seq, len));
    at = {r->generation, r->seq, r->next_pos};
  }
}

class OpLogTest : public ::testing::TestWithParam<Coherence> {};

TEST_P(OpLogTest, ReadersSeeEveryRecordInOrderAcrossWraps) {
  ShmRegion region(OpLog::kMinBytes);
  OpLog writer = Attach(region, GetParam());
  ASSERT_TRUE(writer.StartWriter({}, 1, nullptr).ok());
  OpLog reader = Attach(region, GetParam());
  OpLogPosition at;
  // Odd sizes, so that records straddle the ring's end in every way.
  for (uint64_t seq = 1; seq <= 3000; ++seq) {
    ASSERT_TRUE(writer.Append(Payload(seq, 100 + seq % 37)).ok());
    Result<OpLogRecord> r = reader.ReadNext(at);
    ASSERT_TRUE(r.ok()) << seq << ": " << r.status().ToString();
    ASSERT_EQ(r->seq, seq);
    ASSERT_EQ(r->data, Payload(seq, 100 + seq % 37));
    at = {r->generation, r->seq, r->next_pos};
  }
  EXPECT_EQ(reader.ReadNext(at).status().errnum(), ENODATA);
  EXPECT_EQ(reader.Head().seq, 3000u);
  EXPECT_GT(reader.Head().pos, 4 * reader.ring_bytes());  // it wrapped
}

INSTANTIATE_TEST_SUITE_P(Coherence, OpLogTest,
                         ::testing::Values(Coherence::kHw, Coherence::kFlush));

TEST(OpLog, WhereTheWriterSaysTheNextRecordEnds) {
  ShmRegion region(OpLog::kMinBytes);
  OpLog log = Attach(region);
  ASSERT_TRUE(log.StartWriter({}, 1, nullptr).ok());
  for (uint64_t seq = 1; seq <= 2000; ++seq) {
    const size_t len = 200 + seq % 101;
    const OpLogPosition after = log.After(len);
    ASSERT_TRUE(log.Append(Payload(seq, len)).ok());
    ASSERT_EQ(after.seq, seq);
    ASSERT_EQ(after.pos, log.Head().pos);
  }
}

TEST(OpLog, AnOverrunReaderSaysItIsBehind) {
  ShmRegion region(OpLog::kMinBytes);
  OpLog log = Attach(region);
  ASSERT_TRUE(log.StartWriter({}, 1, nullptr).ok());
  for (uint64_t seq = 1; seq <= 2000; ++seq) ASSERT_TRUE(log.Append(Payload(seq, 100)).ok());
  Result<OpLogRecord> r = log.ReadNext({});
  EXPECT_EQ(r.status().errnum(), ESTALE) << r.status().ToString();
  EXPECT_NE(r.status().message().find("needs a snapshot"), std::string::npos);
}

TEST(OpLog, ACorruptedOrLyingRecordIsRefused) {
  ShmRegion region(OpLog::kMinBytes);
  OpLog log = Attach(region);
  ASSERT_TRUE(log.StartWriter({}, 1, nullptr).ok());
  ASSERT_TRUE(log.Append(Payload(1, 64)).ok());
  ASSERT_TRUE(log.Append(Payload(2, 64)).ok());
  uint8_t *rec = region.base() + OpLog::kHeaderBytes;  // the first record
  // A flipped byte of the bytes: the crc says so.
  rec[24 + 5] ^= 0x40;
  EXPECT_EQ(log.ReadNext({}).status().errnum(), EBADMSG);
  rec[24 + 5] ^= 0x40;
  ASSERT_TRUE(log.ReadNext({}).ok());
  // A length past the head, and one past the ring: refused before reading.
  uint32_t length;
  std::memcpy(&length, rec + 16, 4);
  for (uint32_t lie : {length + 8, 0x7fffffffu, 0xfffffff0u}) {
    std::memcpy(rec + 16, &lie, 4);
    Result<OpLogRecord> r = log.ReadNext({});
    EXPECT_EQ(r.status().errnum(), EBADMSG) << lie;
  }
  std::memcpy(rec + 16, &length, 4);
  // A head beyond what was written, a reader far behind it: behind, not a crash.
  auto *head = reinterpret_cast<std::atomic<uint64_t> *>(region.base() + 64 + 8);
  const uint64_t real = head->load();
  head->store(~uint64_t{0} - 7);
  EXPECT_NE(log.ReadNext({}).status().errnum(), 0);
  head->store(real);
  // A record whose seq skips: refused.
  Result<OpLogRecord> first = log.ReadNext({});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(log.ReadNext({first->generation, 5, first->next_pos}).status().errnum(), EBADMSG);
  // A header that does not verify.
  region.base()[16] ^= 1;  // the ring size
  EXPECT_EQ(log.ReadNext({}).status().errnum(), EBADMSG);
}

// A crc proves no author. With the servers' key, a record that a member of
// the pool's group wrote (a valid crc, no key) is refused, and so is one
// signed by another key; the signed ones read back as they were written,
// where the writer said they would end.
TEST(OpLog, WithAKeyOnlyTheServersRecordsAreApplied) {
  ShmRegion region(OpLog::kMinBytes);
  OpLog leader = Attach(region);
  leader.Authenticate("the pool's servers' secret");
  ASSERT_TRUE(leader.StartWriter({}, 1, nullptr).ok());
  const OpLogPosition after = leader.After(300);
  ASSERT_TRUE(leader.Append(Payload(1, 300)).ok());
  EXPECT_EQ(after.pos, leader.Head().pos);
  OpLog standby = Attach(region);
  standby.Authenticate("the pool's servers' secret");
  Result<OpLogRecord> first = standby.ReadNext({});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->data, Payload(1, 300));

  OpLog other_key = Attach(region);
  other_key.Authenticate("not the servers' secret");
  Result<OpLogRecord> refused = other_key.ReadNext({});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().errnum(), EBADMSG);

  // A forger without the key takes the log over as its writer: its record
  // has a valid crc, and the standby refuses it.
  OpLog forger = Attach(region);
  OpLogPosition at{first->generation, first->seq, first->next_pos};
  ASSERT_TRUE(forger.StartWriter(at, 1, nullptr).ok());
  ASSERT_TRUE(forger.Append(Payload(2, 300) + std::string(OpLog::kMacBytes, 'x')).ok());
  Result<OpLogRecord> forged = standby.ReadNext(at);
  ASSERT_FALSE(forged.ok());
  EXPECT_EQ(forged.status().errnum(), EBADMSG);
  EXPECT_NE(forged.status().message().find("not signed"), std::string::npos);
}

TEST(OpLog, AFenceThatSaysNoWritesNothing) {
  ShmRegion region(OpLog::kMinBytes);
  OpLog log = Attach(region);
  bool leading = true;
  ASSERT_TRUE(log.StartWriter({}, 1, [&] { return leading; }).ok());
  ASSERT_TRUE(log.Append("a").ok());
  const OpLogPosition head = log.Head();
  leading = false;
  Status s = log.Append("b");
  EXPECT_EQ(s.errnum(), EPERM);
  EXPECT_EQ(log.Head().seq, head.seq);
  EXPECT_EQ(log.Head().pos, head.pos);
}

TEST(OpLog, AWriterContinuesItsOwnLogAndFormatsAnyOtherAnew) {
  ShmRegion region(OpLog::kMinBytes);
  OpLogPosition last;
  {
    OpLog log = Attach(region);
    ASSERT_TRUE(log.StartWriter({}, 1, nullptr).ok());
    for (uint64_t seq = 1; seq <= 10; ++seq) {
      last = log.After(50);
      ASSERT_TRUE(log.Append(Payload(seq, 50)).ok());
    }
  }
  // The same database's position: appends go on in the same generation.
  OpLog log = Attach(region);
  ASSERT_TRUE(log.StartWriter(last, 2, nullptr).ok());
  EXPECT_EQ(log.After(50).seq, 11u);
  EXPECT_EQ(log.After(50).generation, last.generation);
  ASSERT_TRUE(log.Append(Payload(11, 50)).ok());
  OpLogPosition end = ReadAll(log, {}, 50);
  EXPECT_EQ(end.seq, 11u);
  // A database one write behind the log: formatted anew; an old reader
  // is told it needs a snapshot.
  OpLog other = Attach(region);
  ASSERT_TRUE(other.StartWriter(last, 3, nullptr).ok());
  EXPECT_GT(other.After(50).generation, last.generation);
  EXPECT_EQ(other.After(50).seq, last.seq + 1);
  EXPECT_EQ(other.ReadNext(end).status().errnum(), ESTALE);
}

TEST(OpLog, ARegionTooSmallIsAnError) {
  ShmRegion region(OpLog::kMinBytes);
  EXPECT_EQ(OpLog::Attach(region.base(), OpLog::kMinBytes - 1, Coherence::kHw).status().errnum(),
            EINVAL);
  OpLog log = Attach(region);
  ASSERT_TRUE(log.StartWriter({}, 1, nullptr).ok());
  EXPECT_EQ(log.Append(std::string(log.max_record_bytes() + 1, 'x')).errnum(), EMSGSIZE);
}

// A reader racing the writer around a small ring: every record it takes is
// whole and in order; when lapped it says it is behind, never hands out a
// record the writer was overwriting.
TEST(OpLog, AReaderRacingTheWriterNeverTakesATornRecord) {
  ShmRegion region(OpLog::kMinBytes);
  OpLog writer = Attach(region);
  ASSERT_TRUE(writer.StartWriter({}, 1, nullptr).ok());
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reader_seq{0};
  // In every other 500 records the writer waits for the reader to
  // stay close (it reads them all); in the others it runs free (it laps).
  std::thread w([&] {
    for (uint64_t seq = 1; seq <= 20000; ++seq) {
      while ((seq / 500) % 2 == 0 && seq > reader_seq.load() + 20) std::this_thread::yield();
      (void)writer.Append(Payload(seq, 300 + seq % 50));
    }
    done = true;
  });
  OpLog reader = Attach(region);
  OpLogPosition at;
  uint64_t read = 0, lapped = 0;
  bool failed = false;  // the writer is joined before the test ends, also on a failure
  while (!done.load() && !failed) {
    Result<OpLogRecord> r = reader.ReadNext(at);
    if (r.ok()) {
      EXPECT_EQ(r->data, Payload(r->seq, 300 + r->seq % 50));
      failed = r->data != Payload(r->seq, 300 + r->seq % 50);
      at = {r->generation, r->seq, r->next_pos};
      ++read;
    } else if (r.status().errnum() == ESTALE) {
      ++lapped;
      at = reader.Head();  // skip ahead (a real standby takes a snapshot)
    } else {
      EXPECT_EQ(r.status().errnum(), ENODATA) << r.status().ToString();
      failed = r.status().errnum() != ENODATA;
    }
    reader_seq = failed ? ~uint64_t{0} >> 1 : at.seq;
  }
  w.join();
  EXPECT_GT(read, 500u);
  std::printf("read %llu records, lapped %llu times\n", static_cast<unsigned long long>(read),
              static_cast<unsigned long long>(lapped));
}

}  // namespace
}  // namespace maru

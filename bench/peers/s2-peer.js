// S2 with other clients' locks.  PROCS processes take one lock in a loop
// and increment a counter inside with GET and SET, as distlock-bench's S2
// does; a process that finds the lock taken tries again after RETRY_MS.
// MODE redlock: node-redlock 4 over ioredis, the most used Redis lock of
// Node.js; MODE setnx: the lock most programs write by hand, SET NX PX
// and a compare-and-delete script, over ioredis.
//
//   node s2-peer.js URL [PROCS=4] [SECS=5] [RETRY_MS=10] [MODE=redlock]
//
// Prints one JSON object: acquisitions/s, lost updates, shares, the
// longest wait in lock().  bench/peer-s2.sh runs it beside distlock.
'use strict';
const { fork } = require('child_process');
const Redis = require('ioredis');
const Redlock = require('redlock');

const [url, procs = '4', secs = '5', retry = '10', mode = 'redlock'] =
  process.argv.slice(2);
const UNLOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
               "return redis.call('del', KEYS[1]) end return 0";
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

// One lock of the chosen kind: lock() resolves once held, to its unlock.
function locker(r) {
  if (mode === 'setnx') {
    const me = process.pid + ':' + Math.random();
    return async () => {
      while ((await r.set(LOCK, me, 'PX', 30000, 'NX')) !== 'OK') await sleep(+retry);
      return () => r.eval(UNLOCK, 1, LOCK, me);
    };
  }
  const redlock = new Redlock([r], { retryCount: -1, retryDelay: +retry,
                                     retryJitter: 0, driftFactor: 0.01 });
  return async () => {
    const l = await redlock.lock(LOCK, 30000);
    return () => l.unlock();
  };
}
const LOCK = 'bench-s2-peer', COUNTER = 'bench-s2-peer-counter';

async function worker() {
  const r = new Redis(url);
  const lock = locker(r);
  await r.ping();
  process.send({ ready: true });
  const end = await new Promise((ok) => process.once('message', (m) => ok(m.end)));
  let count = 0, maxWait = 0n, sumWait = 0n;
  while (Date.now() < end) {
    const t = process.hrtime.bigint();
    const unlock = await lock();
    const w = process.hrtime.bigint() - t;
    if (w > maxWait) maxWait = w;
    sumWait += w;
    const v = Number(await r.get(COUNTER) || 0);
    await r.set(COUNTER, v + 1);
    await unlock();
    count++;
  }
  process.send({ count, maxWaitMs: Number(maxWait) / 1e6,
                 sumWaitMs: Number(sumWait) / 1e6 });
  r.disconnect();
}

async function main() {
  const admin = new Redis(url);
  await admin.del(LOCK);
  await admin.set(COUNTER, 0);
  const kids = [];
  for (let i = 0; i < +procs; i++) kids.push(fork(__filename, [url, procs, secs, retry, mode],
                                                  { env: { ...process.env, S2_CHILD: '1' } }));
  await Promise.all(kids.map((k) => new Promise((ok) => k.once('message', ok))));
  const t0 = Date.now(), end = t0 + Math.round(+secs * 1000);
  const done = kids.map((k) => new Promise((ok) => k.once('message', ok)));
  kids.forEach((k) => k.send({ end }));
  const res = await Promise.all(done);
  const elapsed = (Date.now() - t0) / 1000;
  const total = res.reduce((a, x) => a + x.count, 0);
  const fin = Number(await admin.get(COUNTER));
  const shares = res.map((x) => x.count / total);
  console.log(JSON.stringify({
    client: mode === 'setnx'
      ? 'node SET NX (ioredis ' + require('ioredis/package.json').version + ')'
      : 'node-redlock ' + require('redlock/package.json').version,
    retry_ms: +retry, procs: +procs, seconds: elapsed, acquisitions: total,
    acq_per_s: total / elapsed, lost_updates: total - fin,
    min_share: Math.min(...shares), max_share: Math.max(...shares),
    max_wait_ms: Math.max(...res.map((x) => x.maxWaitMs)),
    mean_wait_ms: res.reduce((a, x) => a + x.sumWaitMs, 0) / total,
    per_proc: res.map((x) => x.count) }));
  await admin.del(LOCK, COUNTER);
  admin.disconnect();
}

if (process.env.S2_CHILD) worker().catch((e) => { console.error(e); process.exit(1); });
else main().catch((e) => { console.error(e); process.exit(1); });

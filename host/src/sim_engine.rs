//! The engine thread that drives a software mlx5 device ([`mlx5_raw::sim`]) in real time.
//!
//! The device model never reads a clock and does nothing unless stepped. [`SimEngine`]
//! owns a device on its own thread and calls `step(now)` in a loop with `now` from
//! `CLOCK_MONOTONIC` ([`monotonic_ns`]), a clock every process on the machine shares, so
//! devices in different processes agree on the delivery times stamped on link packets.
//!
//! Application threads reach the device (to create objects, inject faults, read
//! snapshots) through [`SimEngine::with`], which takes the device's lock between two
//! steps; the data path (posting WQEs, polling CQs) needs no lock at all, because it is
//! the driver's memory protocol with the device, as with hardware.
//!
//! Idle policy: on a machine with few cores a spinning engine starves the application
//! threads it serves, so by default the engine yields the CPU after a step that did
//! nothing ([`Idle::Yield`]); [`Idle::Spin`] is for pinned cores. Stopping sets a flag
//! the loop checks every step and joins the thread ([`SimEngine::stop`], or drop).
//!
//! ```
//! use copyrpc_host::sim_engine::{EngineConfig, SimEngine};
//! use mlx5_raw::sim::{Device, DeviceConfig};
//!
//! let dev = Box::new(Device::<4, 4, 1, 8>::new(DeviceConfig::DEFAULT));
//! let engine = SimEngine::start(dev, EngineConfig::default()).unwrap();
//! let pd = engine.with(|d| d.alloc_pd());
//! # let _ = pd;
//! let dev = engine.stop(); // joins the thread and hands the device back
//! # drop(dev);
//! ```

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use mlx5_raw::sim::{Device, StepStats, Trace, TraceEvent, TraceSink};

/// Something an engine can step: [`Device`] of any capacity, or a box of one.
pub trait SimDevice: Send + 'static {
    /// One step at `now_ns`, optionally traced.
    fn step_at(&mut self, now_ns: u64, trace: Option<&mut dyn TraceSink>) -> StepStats;
}

impl<const Q: usize, const C: usize, const S: usize, const M: usize> SimDevice
    for Device<Q, C, S, M>
{
    fn step_at(&mut self, now_ns: u64, trace: Option<&mut dyn TraceSink>) -> StepStats {
        match trace {
            Some(t) => self.step_traced(now_ns, t),
            None => self.step(now_ns),
        }
    }
}

impl<D: SimDevice> SimDevice for Box<D> {
    fn step_at(&mut self, now_ns: u64, trace: Option<&mut dyn TraceSink>) -> StepStats {
        (**self).step_at(now_ns, trace)
    }
}

/// What the engine does after a step in which nothing happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idle {
    /// Step again at once (for an engine pinned to a core of its own).
    Spin,
    /// `std::thread::yield_now()` (the default: leaves the core to the application).
    Yield,
    /// Spin this many idle steps in a row, then yield.
    SpinThenYield(u32),
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Idle policy.
    pub idle: Idle,
    /// Keep the newest this many trace events (0: no tracing, the fastest).
    pub trace_events: usize,
    /// Thread name.
    pub name: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            idle: Idle::Yield,
            trace_events: 0,
            name: "mlx5-sim".to_owned(),
        }
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC`: the same clock in every process of the machine.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct State<D> {
    dev: D,
    trace: Option<Trace<Vec<TraceEvent>>>,
}

struct Shared<D> {
    state: Mutex<State<D>>,
    stop: AtomicBool,
    /// Threads waiting in `with`: the engine yields between steps while nonzero, so a
    /// spinning engine cannot starve them of the lock.
    waiters: AtomicUsize,
    steps: AtomicU64,
}

impl<D: SimDevice> Shared<D> {
    fn new(dev: D, trace_events: usize) -> Arc<Self> {
        let trace = (trace_events > 0).then(|| Trace::new(vec![TraceEvent::EMPTY; trace_events]));
        Arc::new(Self {
            state: Mutex::new(State { dev, trace }),
            stop: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            steps: AtomicU64::new(0),
        })
    }

    /// One step at `now` (traced if the engine keeps a trace), counted.
    fn step(&self, now: u64) -> StepStats {
        let stats = {
            let mut st = self.lock();
            let State { dev, trace } = &mut *st;
            match trace {
                Some(t) => dev.step_at(now, Some(t)),
                None => dev.step_at(now, None),
            }
        };
        // Relaxed: a statistic.
        self.steps.fetch_add(1, Ordering::Relaxed);
        stats
    }
}

impl<D> Shared<D> {
    fn lock(&self) -> MutexGuard<'_, State<D>> {
        // A panic inside the device poisons the lock; the state is still the device's,
        // and `stop` re-raises the engine's panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A device stepped by its own thread. See the module docs.
pub struct SimEngine<D: SimDevice> {
    shared: Arc<Shared<D>>,
    thread: Option<JoinHandle<()>>,
}

impl<D: SimDevice> std::fmt::Debug for SimEngine<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimEngine")
            .field("steps", &self.steps())
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl<D: SimDevice> SimEngine<D> {
    /// Starts the engine thread on `dev`. Fails only if the thread cannot be spawned.
    pub fn start(dev: D, cfg: EngineConfig) -> std::io::Result<Self> {
        let shared = Shared::new(dev, cfg.trace_events);
        let s = Arc::clone(&shared);
        let idle = cfg.idle;
        let thread = std::thread::Builder::new()
            .name(cfg.name)
            .spawn(move || run(&s, idle))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// An engine without a thread: nothing steps `dev` but [`step_manual`](Self::step_manual).
    /// For a caller that owns time itself (benchkv's virtual-time world steps each device
    /// at the virtual instants its scheduler picks); the data path is the same.
    pub fn manual(dev: D, trace_events: usize) -> Self {
        Self {
            shared: Shared::new(dev, trace_events),
            thread: None,
        }
    }

    /// One step at `now_ns`, for an engine made by [`manual`](Self::manual). `None` when a
    /// thread steps this engine: two steppers would each move the device's clock.
    pub fn step_manual(&self, now_ns: u64) -> Option<StepStats> {
        if self.thread.is_some() {
            return None;
        }
        Some(self.shared.step(now_ns))
    }

    /// Runs `f` on the device between two steps (object creation, faults, snapshots).
    pub fn with<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
        // Relaxed: a scheduling hint for the engine loop; the mutex orders the access.
        self.shared.waiters.fetch_add(1, Ordering::Relaxed);
        let mut st = self.shared.lock();
        self.shared.waiters.fetch_sub(1, Ordering::Relaxed);
        f(&mut st.dev)
    }

    /// Steps run so far.
    pub fn steps(&self) -> u64 {
        // Relaxed: a statistic.
        self.shared.steps.load(Ordering::Relaxed)
    }

    /// The retained trace, printed (empty if tracing is off).
    pub fn trace_dump(&self) -> String {
        let st = self.shared.lock();
        let mut s = String::new();
        if let Some(t) = &st.trace {
            write!(s, "{t}").ok();
        }
        s
    }

    /// Stops the loop, joins the thread, and returns the device. If the engine thread
    /// panicked (a model bug), the panic is resumed here.
    pub fn stop(mut self) -> D {
        self.halt();
        let shared = Arc::clone(&self.shared);
        drop(self);
        match Arc::try_unwrap(shared) {
            Ok(s) => s.state.into_inner().unwrap_or_else(|e| e.into_inner()).dev,
            Err(_) => unreachable!("the engine thread has exited and holds no reference"),
        }
    }

    fn halt(&mut self) {
        // Relaxed: the loop only needs to see it eventually; `join` orders the rest.
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if let Err(panic) = t.join() {
                if !std::thread::panicking() {
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
}

impl<D: SimDevice> Drop for SimEngine<D> {
    fn drop(&mut self) {
        self.halt();
    }
}

fn run<D: SimDevice>(s: &Shared<D>, idle: Idle) {
    let mut idle_steps = 0u32;
    // Relaxed: see `halt`.
    while !s.stop.load(Ordering::Relaxed) {
        let progressed = s.step(monotonic_ns()).progressed();
        idle_steps = if progressed {
            0
        } else {
            idle_steps.saturating_add(1)
        };
        // Relaxed: a hint (see `Shared::waiters`).
        let contended = s.waiters.load(Ordering::Relaxed) > 0;
        let yield_now = contended
            || match idle {
                Idle::Spin => false,
                Idle::Yield => idle_steps > 0,
                Idle::SpinThenYield(n) => idle_steps > n,
            };
        if yield_now {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::time::{Duration, Instant};

    use mlx5_raw::layout::{CqeOpcode, FmCeSe};
    use mlx5_raw::sim::{
        format_link, link_bytes, Access, CqMem, DeviceConfig, LinkConfig, LinkDesc, QpAttr, SqMem,
        SrqMem,
    };
    use mlx5_raw::{Cq, Payload, Remote, Sq, SqConfig, Srq};

    use super::*;

    /// Zeroed, 4096-aligned test memory used through raw pointers only.
    struct Mem(*mut u8, Layout);
    impl Mem {
        fn new(len: usize) -> Self {
            let l = Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: non-zero size.
            Self(unsafe { alloc_zeroed(l) }, l)
        }
    }
    impl Drop for Mem {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.0, self.1) }
        }
    }

    type Dev = Box<Device<2, 2, 1, 2>>;

    #[test]
    fn engine_thread_serves_the_driver() {
        let mem: Vec<Mem> = (0..10).map(|_| Mem::new(1 << 16)).collect();
        let engine = SimEngine::start(
            Dev::new(Device::new(DeviceConfig::DEFAULT)),
            EngineConfig {
                trace_events: 256,
                ..EngineConfig::default()
            },
        )
        .unwrap();
        let lb = link_bytes(16, 1024);
        // SAFETY: every `Mem` outlives the engine (stopped at the end of the test, before
        // `mem` drops); each buffer has one role.
        let (mut sq, mut scq, mut rcq, mut srq, keys) = engine.with(|d| unsafe {
            let pd = d.alloc_pd();
            let keys = d.reg_mr(pd, mem[0].0, 1 << 16, Access::ALL).unwrap();
            let cq = |i: usize| CqMem {
                buf: mem[i].0,
                cqe_cnt: 64,
                cqe_size: 64,
                dbrec: mem[9].0.add(i * 64).cast(),
            };
            let scq = d.create_cq(cq(1)).unwrap();
            let rcq = d.create_cq(cq(2)).unwrap();
            let srq = d
                .create_srq(
                    pd,
                    SrqMem {
                        buf: mem[3].0,
                        wqe_cnt: 64,
                        stride: 32,
                        dbrec: mem[9].0.add(3 * 64).cast(),
                    },
                )
                .unwrap();
            let mut qp = |i: usize, s| {
                d.create_qp(
                    pd,
                    QpAttr::new(scq.cqn, rcq.cqn, s),
                    SqMem {
                        buf: mem[i].0,
                        wqe_cnt: 256,
                        dbrec: mem[9].0.add(i * 64).cast(),
                        uar: mem[8].0.add(i * 4096 - 16384),
                    },
                )
                .unwrap()
            };
            let a = qp(4, None);
            let b = qp(5, Some(srq.srqn));
            let ab = LinkDesc {
                base: mem[6].0,
                len: lb,
            };
            let ba = LinkDesc {
                base: mem[7].0,
                len: lb,
            };
            format_link(&ab, 16, 1024).unwrap();
            format_link(&ba, 16, 1024).unwrap();
            d.connect_pair(a.qpn, b.qpn, ab, ba, LinkConfig::default())
                .unwrap();
            (
                Sq::new(&a, SqConfig::COPYRPC).unwrap(),
                Cq::new(&scq).unwrap(),
                Cq::new(&rcq).unwrap(),
                Srq::new(&srq, keys.lkey).unwrap(),
                keys,
            )
        });
        srq.post_batch(63).unwrap();
        let n = 2000u32;
        let (mut sent, mut got) = (0u32, 0u32);
        let deadline = Instant::now() + Duration::from_secs(60);
        while got < n {
            assert!(
                Instant::now() < deadline,
                "engine exchange stuck at {got}/{n}\n{}",
                engine.trace_dump()
            );
            if sent < n && sq.free_bbs() > 0 {
                let mut b = sq.batch();
                let v = sent.to_be_bytes();
                b.rdma_write_imm(
                    Remote {
                        addr: keys.va + u64::from(sent % 64) * 4,
                        rkey: keys.rkey,
                    },
                    Payload::inline(&v),
                    v,
                    FmCeSe::COMP_ONLY_ERR,
                )
                .unwrap();
                b.finish();
                sent += 1;
            }
            while let Some(c) = scq.poll() {
                let c = c.decode().unwrap();
                assert_eq!(c.opcode, CqeOpcode::Req, "{c:?}");
                sq.retire_completion(&c).unwrap();
            }
            scq.update_ci();
            while let Some(c) = rcq.poll() {
                let c = c.decode().unwrap();
                assert_eq!(c.opcode, CqeOpcode::RespWrImm);
                assert_eq!(c.imm, Some(got.to_be_bytes()));
                // Publish the consumer index before reposting: a repost lets the device
                // write another CQE, and with SET_CI left stale through a long drain the
                // CQEs beyond it could exceed the CQ and overrun it (the model reports
                // that as a CQ error and writes no more).
                rcq.update_ci();
                srq.free(c.wqe_counter).unwrap();
                srq.post_batch(1).unwrap();
                got += 1;
            }
            std::thread::yield_now();
        }
        assert!(engine.steps() > 0);
        assert!(engine.trace_dump().contains("RESP") || engine.trace_dump().contains("RespWrImm"));
        let dev = engine.stop();
        assert!(dev
            .qp_infos()
            .all(|q| q.state == mlx5_raw::sim::QpState::Rts));
        drop(dev);
        drop(mem);
    }
}

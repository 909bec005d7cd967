//! Building a `perf_event_attr`.

use perf_event_open_sys::bindings as b;

/// Hardware events (`PERF_TYPE_HARDWARE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HardwareEvent {
    /// Retired instructions.
    Instructions,
    /// CPU cycles.
    Cycles,
    /// Retired branch instructions.
    BranchInstructions,
    /// Mispredicted branches.
    BranchMisses,
}

/// Software events (`PERF_TYPE_SOFTWARE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftwareEvent {
    /// A per-CPU high-resolution timer (`cpu-clock`); periods are nanoseconds.
    CpuClock,
    /// The task's own clock (`task-clock`); periods are nanoseconds.
    TaskClock,
    /// Page faults.
    PageFaults,
    /// Context switches.
    ContextSwitches,
}

/// What an event counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A generalized hardware event.
    Hardware(HardwareEvent),
    /// A software event.
    Software(SoftwareEvent),
    /// Any `(type, config)` pair, e.g. a raw PMU event or a dynamic PMU type.
    Raw {
        /// `perf_event_attr.type`.
        ty: u32,
        /// `perf_event_attr.config`.
        config: u64,
    },
}

impl EventKind {
    /// The name `perf` uses for the event (`instructions`, `cpu-clock`, ...), or
    /// `raw:TYPE:CONFIG`.
    pub fn name(self) -> String {
        match self {
            EventKind::Hardware(h) => match h {
                HardwareEvent::Instructions => "instructions",
                HardwareEvent::Cycles => "cycles",
                HardwareEvent::BranchInstructions => "branch-instructions",
                HardwareEvent::BranchMisses => "branch-misses",
            }
            .to_string(),
            EventKind::Software(s) => match s {
                SoftwareEvent::CpuClock => "cpu-clock",
                SoftwareEvent::TaskClock => "task-clock",
                SoftwareEvent::PageFaults => "page-faults",
                SoftwareEvent::ContextSwitches => "context-switches",
            }
            .to_string(),
            EventKind::Raw { ty, config } => format!("raw:{ty}:{config:#x}"),
        }
    }

    fn type_config(self) -> (u32, u64) {
        match self {
            EventKind::Hardware(h) => (
                b::PERF_TYPE_HARDWARE,
                u64::from(match h {
                    HardwareEvent::Instructions => b::PERF_COUNT_HW_INSTRUCTIONS,
                    HardwareEvent::Cycles => b::PERF_COUNT_HW_CPU_CYCLES,
                    HardwareEvent::BranchInstructions => b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
                    HardwareEvent::BranchMisses => b::PERF_COUNT_HW_BRANCH_MISSES,
                }),
            ),
            EventKind::Software(s) => (
                b::PERF_TYPE_SOFTWARE,
                u64::from(match s {
                    SoftwareEvent::CpuClock => b::PERF_COUNT_SW_CPU_CLOCK,
                    SoftwareEvent::TaskClock => b::PERF_COUNT_SW_TASK_CLOCK,
                    SoftwareEvent::PageFaults => b::PERF_COUNT_SW_PAGE_FAULTS,
                    SoftwareEvent::ContextSwitches => b::PERF_COUNT_SW_CONTEXT_SWITCHES,
                }),
            ),
            EventKind::Raw { ty, config } => (ty, config),
        }
    }
}

/// The fields a sample record carries (`PERF_SAMPLE_*` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleFormat(pub u64);

impl SampleFormat {
    /// `PERF_SAMPLE_IDENTIFIER`: the event id, first in the record.
    pub const IDENTIFIER: SampleFormat = SampleFormat(b::PERF_SAMPLE_IDENTIFIER as u64);
    /// `PERF_SAMPLE_IP`: the instruction pointer.
    pub const IP: SampleFormat = SampleFormat(b::PERF_SAMPLE_IP as u64);
    /// `PERF_SAMPLE_TID`: process and thread id.
    pub const TID: SampleFormat = SampleFormat(b::PERF_SAMPLE_TID as u64);
    /// `PERF_SAMPLE_TIME`: timestamp.
    pub const TIME: SampleFormat = SampleFormat(b::PERF_SAMPLE_TIME as u64);
    /// `PERF_SAMPLE_ADDR`: an address (data address, breakpoint address).
    pub const ADDR: SampleFormat = SampleFormat(b::PERF_SAMPLE_ADDR as u64);
    /// `PERF_SAMPLE_ID`: the event id.
    pub const ID: SampleFormat = SampleFormat(b::PERF_SAMPLE_ID as u64);
    /// `PERF_SAMPLE_STREAM_ID`: the id of the group leader's stream.
    pub const STREAM_ID: SampleFormat = SampleFormat(b::PERF_SAMPLE_STREAM_ID as u64);
    /// `PERF_SAMPLE_CPU`: the CPU.
    pub const CPU: SampleFormat = SampleFormat(b::PERF_SAMPLE_CPU as u64);
    /// `PERF_SAMPLE_PERIOD`: the period of this sample.
    pub const PERIOD: SampleFormat = SampleFormat(b::PERF_SAMPLE_PERIOD as u64);
    /// `PERF_SAMPLE_CALLCHAIN`: the call chain (kernel and user frames with context markers).
    pub const CALLCHAIN: SampleFormat = SampleFormat(b::PERF_SAMPLE_CALLCHAIN as u64);
    /// `PERF_SAMPLE_REGS_USER`: the user-mode registers chosen with
    /// [`EventAttr::sample_regs_user`].
    pub const REGS_USER: SampleFormat = SampleFormat(b::PERF_SAMPLE_REGS_USER as u64);
    /// `PERF_SAMPLE_STACK_USER`: a copy of the top of the user stack, of the size chosen
    /// with [`EventAttr::sample_stack_user`].
    pub const STACK_USER: SampleFormat = SampleFormat(b::PERF_SAMPLE_STACK_USER as u64);

    /// Every bit [`crate::Sample::parse`] decodes.
    pub const DECODED: SampleFormat = SampleFormat(
        Self::IDENTIFIER.0
            | Self::IP.0
            | Self::TID.0
            | Self::TIME.0
            | Self::ADDR.0
            | Self::ID.0
            | Self::STREAM_ID.0
            | Self::CPU.0
            | Self::PERIOD.0
            | Self::CALLCHAIN.0
            | Self::REGS_USER.0
            | Self::STACK_USER.0,
    );

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: SampleFormat) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for SampleFormat {
    type Output = SampleFormat;
    fn bitor(self, rhs: SampleFormat) -> SampleFormat {
        SampleFormat(self.0 | rhs.0)
    }
}

/// A `perf_event_attr` under construction. Defaults: counting (no sampling), enabled,
/// kernel and hypervisor excluded.
#[derive(Clone)]
pub struct EventAttr {
    pub(crate) raw: b::perf_event_attr,
    pub(crate) kind: EventKind,
}

impl std::fmt::Debug for EventAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventAttr")
            .field("kind", &self.kind)
            .field("sample_type", &self.raw.sample_type)
            .finish_non_exhaustive()
    }
}

impl EventAttr {
    /// An attribute for `kind`.
    pub fn new(kind: EventKind) -> Self {
        let mut raw = b::perf_event_attr::default();
        let (ty, config) = kind.type_config();
        raw.type_ = ty;
        raw.config = config;
        raw.size = std::mem::size_of::<b::perf_event_attr>() as u32;
        raw.set_exclude_kernel(1);
        raw.set_exclude_hv(1);
        EventAttr { raw, kind }
    }

    /// What the event counts.
    pub fn kind(&self) -> EventKind {
        self.kind
    }

    /// Samples every `period` events (fixed period: the phase of consecutive samples is
    /// exact, which frequency mode would destroy).
    pub fn sample_period(mut self, period: u64) -> Self {
        self.raw.set_freq(0);
        self.raw.sample_period = period;
        self
    }

    /// Samples about `hz` times a second (the kernel adjusts the period).
    pub fn sample_frequency(mut self, hz: u64) -> Self {
        self.raw.set_freq(1);
        self.raw.sample_freq = hz;
        self
    }

    /// What each sample carries.
    pub fn sample_format(mut self, format: SampleFormat) -> Self {
        self.raw.sample_type = format.0;
        self
    }

    /// Starts disabled (enable with [`crate::Event::enable`]).
    pub fn disabled(mut self, yes: bool) -> Self {
        self.raw.set_disabled(u64::from(yes));
        self
    }

    /// Enables the event when the target calls `execve`.
    pub fn enable_on_exec(mut self, yes: bool) -> Self {
        self.raw.set_enable_on_exec(u64::from(yes));
        self
    }

    /// Excludes kernel-mode events (the default; required by `perf_event_paranoid` ≥ 2
    /// for unprivileged users).
    pub fn exclude_kernel(mut self, yes: bool) -> Self {
        self.raw.set_exclude_kernel(u64::from(yes));
        self
    }

    /// Excludes hypervisor events (the default).
    pub fn exclude_hv(mut self, yes: bool) -> Self {
        self.raw.set_exclude_hv(u64::from(yes));
        self
    }

    /// Counts in child tasks created after the event was opened.
    pub fn inherit(mut self, yes: bool) -> Self {
        self.raw.set_inherit(u64::from(yes));
        self
    }

    /// Skid constraint, 0 (arbitrary skid) to 3 (zero skid); see `perf_event_open(2)`.
    pub fn precise_ip(mut self, level: u8) -> Self {
        self.raw.set_precise_ip(u64::from(level.min(3)));
        self
    }

    /// Wakes a poller every `n` samples.
    pub fn wakeup_events(mut self, n: u32) -> Self {
        self.raw.set_watermark(0);
        self.raw.wakeup_events = n;
        self
    }

    /// Wakes a poller when `bytes` of records are waiting in the ring (cheaper than
    /// [`EventAttr::wakeup_events`] at high sample rates).
    pub fn wakeup_watermark(mut self, bytes: u32) -> Self {
        self.raw.set_watermark(1);
        self.raw.wakeup_watermark = bytes;
        self
    }

    /// The user-mode registers each sample carries (a bit mask of `PERF_REG_*` numbers;
    /// needs [`SampleFormat::REGS_USER`]).
    pub fn sample_regs_user(mut self, mask: u64) -> Self {
        self.raw.sample_regs_user = mask;
        self
    }

    /// How many bytes of user stack each sample copies (a multiple of 8; needs
    /// [`SampleFormat::STACK_USER`]).
    pub fn sample_stack_user(mut self, bytes: u32) -> Self {
        self.raw.sample_stack_user = bytes & !7;
        self
    }

    /// Deepest call chain the kernel records (0: the system default,
    /// `kernel.perf_event_max_stack`).
    pub fn sample_max_stack(mut self, frames: u16) -> Self {
        self.raw.sample_max_stack = frames;
        self
    }

    /// Leaves the user part out of [`SampleFormat::CALLCHAIN`] (when user stacks are
    /// unwound from a stack copy instead).
    pub fn exclude_callchain_user(mut self, yes: bool) -> Self {
        self.raw.set_exclude_callchain_user(u64::from(yes));
        self
    }

    /// Adds the sample-id trailer (the fields of the sample format among TID, TIME, ID,
    /// STREAM_ID, CPU and IDENTIFIER) to every side-band record, so they can be ordered
    /// and attributed like samples.
    pub fn sample_id_all(mut self, yes: bool) -> Self {
        self.raw.set_sample_id_all(u64::from(yes));
        self
    }

    /// Emits `PERF_RECORD_MMAP2` records for executable mappings (with the build id where
    /// the kernel supports it, see [`EventAttr::mmap_build_id`]).
    pub fn mmap2(mut self, yes: bool) -> Self {
        self.raw.set_mmap(u64::from(yes));
        self.raw.set_mmap2(u64::from(yes));
        self
    }

    /// Asks for build ids instead of device and inode numbers in `MMAP2` records.
    pub fn mmap_build_id(mut self, yes: bool) -> Self {
        self.raw.set_build_id(u64::from(yes));
        self
    }

    /// Emits `PERF_RECORD_COMM` records on `exec` and on thread renames.
    pub fn comm(mut self, yes: bool) -> Self {
        self.raw.set_comm(u64::from(yes));
        self.raw.set_comm_exec(u64::from(yes));
        self
    }

    /// Emits `PERF_RECORD_FORK` and `PERF_RECORD_EXIT` records.
    pub fn task(mut self, yes: bool) -> Self {
        self.raw.set_task(u64::from(yes));
        self
    }

    /// The sample format requested.
    pub fn format(&self) -> SampleFormat {
        SampleFormat(self.raw.sample_type)
    }

    /// The user registers requested (see [`EventAttr::sample_regs_user`]).
    pub fn regs_user(&self) -> u64 {
        self.raw.sample_regs_user
    }

    /// Whether side-band records carry the sample-id trailer.
    pub fn has_sample_id_all(&self) -> bool {
        self.raw.sample_id_all() != 0
    }
}

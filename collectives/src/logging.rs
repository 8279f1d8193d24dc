//! `RCOLL_DEBUG=error|warn|info|debug|trace`: print rcoll's own `tracing` events to
//! stderr — connection setup, the transport and algorithm of each call, peers — the way
//! `NCCL_DEBUG` does. Applications that install their own `tracing` subscriber get the
//! events there instead, and this does nothing.

use std::io::IsTerminal;
use std::sync::Once;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

static INIT: Once = Once::new();

/// Installs the stderr subscriber once, if `RCOLL_DEBUG` asks for one.
pub(crate) fn init_from_env() {
    INIT.call_once(|| {
        let Ok(level) = std::env::var("RCOLL_DEBUG") else { return };
        let Ok(level) = level.trim().parse::<LevelFilter>() else {
            eprintln!("rcoll: ignoring RCOLL_DEBUG={level:?} (expected error, warn, info, debug or trace)");
            return;
        };
        let only_rcoll = Targets::new().with_target("rcoll", level).with_target("rcoll_transport", level);
        let colour = std::io::stderr().is_terminal();
        let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(colour);
        // An application's own subscriber wins; then this one is not installed.
        let _ = tracing_subscriber::registry().with(fmt).with(only_rcoll).try_init();
    });
}

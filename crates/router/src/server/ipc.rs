//! Shared-memory clients: their logins on `DIR/router.sock`, checked, and
//! each handed to a routing agent with its logs.

use super::Server;
use crate::agent::Control;
use crate::ipc_login::Request;
use std::path::PathBuf;
use tickwire_shm::{LogConfig, ReaderOptions};
use tickwire_wire::client::{IPC_IN_CHANNEL, IPC_OUT_CHANNEL};

impl Server {
    /// Acts on the shared-memory logins that came whole.
    pub(super) fn take_logins(&mut self, now: u64) -> usize {
        let Some(login) = &mut self.ipc_login else { return 0 };
        // No allocation unless a login came.
        let mut logins = Vec::new();
        login.poll(now, &mut logins);
        let n = logins.len();
        for r in logins {
            let (stream, pid) = (r.stream, r.pid);
            if let Err(why) = self.attach_ipc(r) {
                tracing::debug!(stream, pid, "shared-memory login refused: {why}");
                if let Some(l) = &mut self.ipc_login {
                    l.note_refusal(&format!("pid {pid}, {IPC_IN_CHANNEL}-{stream}: {why}"), now);
                }
            }
        }
        n
    }

    /// Serves the shared-memory client that logged in with `r`; refused
    /// (and told why on its socket) when its log is not the connecting
    /// process's, carried an earlier session, or is served already.
    fn attach_ipc(&mut self, r: Request) -> Result<(), String> {
        let Request { stream, log, hello, pid, uid, conn } = r;
        let refuse = |why: String| {
            crate::ipc_login::refuse(&conn, &why);
            Err(why)
        };
        if self.ipc_serving.contains(&stream) {
            return refuse(format!("{IPC_IN_CHANNEL}-{stream} is served already"));
        }
        // The client's file, checked to be sealed against shrinking; mapped
        // inside `untrusted` all the same, so that a file shrunk under us
        // would end this session, not the router.
        let label = PathBuf::from(format!("memfd:{IPC_IN_CHANNEL}-{stream} (from pid {pid})"));
        let opts = ReaderOptions::default();
        let reader = match tickwire_shm::os::untrusted(|| self.ctx.reader_fd(&log, &label, opts)) {
            Ok(r) => r,
            Err(e) => return refuse(format!("its log: {e}")),
        };
        drop(log);
        let d = reader.descriptor();
        if d.stream_id != stream || d.channel != IPC_IN_CHANNEL {
            return refuse(format!("its log is {}-{}, not {IPC_IN_CHANNEL}-{stream}", d.channel, d.stream_id));
        }
        if i64::from(d.publisher.pid) != i64::from(pid) {
            return refuse(format!(
                "{IPC_IN_CHANNEL}-{stream} is pid {}'s log, not the connecting process's (pid {pid})",
                d.publisher.pid
            ));
        }
        if reader.position() > 0 {
            // A client logs in before it writes to its log, so a log that
            // has carried frames belongs to an ended session.
            return refuse(format!(
                "{IPC_IN_CHANNEL}-{stream}: carried an earlier session (position {})",
                reader.position()
            ));
        }
        let cfg = LogConfig::with_capacity(self.cfg.ipc_log_bytes);
        let (out, file) = match self.ctx.appender_sealed(IPC_OUT_CHANNEL, stream, &cfg) {
            Ok(o) => o,
            Err(e) => return refuse(format!("its log out of the router: {e}")),
        };
        // Taken: one zero byte (a refusal is text) with our log beside it.
        if let Err(e) = crate::ipc_login::accept(&conn, &file) {
            return Err(format!("the answer could not be sent: {e}"));
        }
        drop(file);
        self.ipc_serving.insert(stream);
        self.hand(Control::Ipc {
            stream,
            reader: Box::new(reader),
            out: Box::new(out),
            peer: format!("ipc pid {pid} uid {uid}"),
            hello,
            uid,
        });
        Ok(())
    }
}

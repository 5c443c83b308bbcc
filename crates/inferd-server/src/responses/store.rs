//! The one owner of stored responses: an in-memory map under a byte budget with
//! least-recently-used expiry, written through to disk by [`super::persist`] when a
//! directory is configured. Each stored response names the engine session that holds its
//! conversation's KV; when the last response naming a session goes, the session is
//! released too (the caller does it: the store knows no engine).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::persist::{self, Writer};

/// Default byte budget of stored responses.
pub const DEFAULT_BUDGET_BYTES: u64 = 256 << 20;

/// Where and how much.
#[derive(Clone, Debug)]
pub struct ResponsesConfig {
    /// Directory of the stored responses' files; `None`: memory only.
    pub dir: Option<PathBuf>,
    /// Most bytes (serialized) of stored responses; the least recently used go first.
    pub budget_bytes: u64,
}

impl Default for ResponsesConfig {
    fn default() -> Self {
        ResponsesConfig {
            dir: None,
            budget_bytes: DEFAULT_BUDGET_BYTES,
        }
    }
}

/// One stored response.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stored {
    /// The response object as `GET /v1/responses/{id}` returns it.
    pub response: Value,
    /// The request's input items, with ids.
    pub input_items: Vec<Value>,
    /// The whole conversation up to and including this response's output, as chat
    /// messages (without `instructions`, which do not carry over).
    pub conversation: Vec<Value>,
    /// The engine session holding the conversation's KV.
    pub session: String,
    /// Unix seconds, for the order of expiry after a restart.
    pub created: u64,
}

struct Entry {
    stored: Arc<Stored>,
    bytes: u64,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// tick -> id, oldest first.
    lru: BTreeMap<u64, String>,
    /// How many stored responses name each session.
    sessions: HashMap<String, usize>,
    tick: u64,
    bytes: u64,
    expired: u64,
}

impl Inner {
    fn touch(&mut self, id: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.map.get_mut(id) {
            self.lru.remove(&e.tick);
            e.tick = tick;
            self.lru.insert(tick, id.to_string());
        }
    }

    /// Removes `id`; returns its session when no other response names it.
    fn take(&mut self, id: &str) -> Option<(Arc<Stored>, Option<String>)> {
        let e = self.map.remove(id)?;
        self.lru.remove(&e.tick);
        self.bytes -= e.bytes;
        let s = &e.stored.session;
        let n = self.sessions.get_mut(s).map(|n| {
            *n -= 1;
            *n
        });
        let freed = (n == Some(0)).then(|| {
            self.sessions.remove(s);
            s.clone()
        });
        Some((e.stored, freed))
    }

    fn insert(&mut self, id: String, stored: Arc<Stored>, bytes: u64) {
        self.tick += 1;
        *self.sessions.entry(stored.session.clone()).or_default() += 1;
        self.lru.insert(self.tick, id.clone());
        self.bytes += bytes;
        self.map.insert(
            id,
            Entry {
                stored,
                bytes,
                tick: self.tick,
            },
        );
    }
}

pub struct ResponseStore {
    inner: Mutex<Inner>,
    budget: u64,
    writer: Option<Writer>,
    dir: Option<PathBuf>,
}

impl ResponseStore {
    /// Opens the store, reading back what the directory holds. A directory that cannot
    /// be used is logged and the store runs in memory.
    pub fn open(cfg: &ResponsesConfig) -> Self {
        let mut store = ResponseStore {
            inner: Mutex::new(Inner::default()),
            budget: cfg.budget_bytes,
            writer: None,
            dir: None,
        };
        let Some(dir) = &cfg.dir else { return store };
        // The lock first: loading cleans the directory of temp files.
        let loaded = persist::lock(dir).and_then(|lock| {
            let l = persist::load(dir)?;
            Ok((l, Writer::start(dir.clone(), lock)?))
        });
        match loaded {
            Ok((mut items, writer)) => {
                items.sort_by_key(|(_, s, _)| s.created);
                store.writer = Some(writer);
                store.dir = Some(dir.clone());
                for (id, s, bytes) in items {
                    store.insert(id, s, bytes as u64);
                }
            }
            Err(e) => eprintln!(
                "inferd: stored responses stay in memory: {}: {e}",
                dir.display()
            ),
        }
        store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Inserts and expires past the budget; returns the sessions no response names now.
    fn insert(&self, id: String, stored: Stored, bytes: u64) -> Vec<String> {
        let mut g = self.lock();
        let mut freed = Vec::new();
        if let Some((_, f)) = g.take(&id) {
            freed.extend(f);
        }
        g.insert(id.clone(), Arc::new(stored), bytes);
        while g.bytes > self.budget {
            let Some((_, oldest)) = g.lru.iter().next().map(|(t, i)| (*t, i.clone())) else {
                break;
            };
            if let Some((_, f)) = g.take(&oldest) {
                freed.extend(f);
                g.expired += 1;
                if let Some(w) = &self.writer {
                    w.remove(&oldest);
                }
            }
        }
        freed.retain(|s| !g.sessions.contains_key(s));
        freed
    }

    /// Keeps a response (written through to disk); returns the sessions to release.
    pub fn put(&self, id: &str, stored: Stored) -> Vec<String> {
        let bytes = persist::encode(&stored);
        let n = bytes.len() as u64;
        if let Some(w) = &self.writer {
            w.put(id, bytes);
        }
        self.insert(id.to_string(), stored, n)
    }

    /// A stored response (now the most recently used).
    pub fn get(&self, id: &str) -> Option<Arc<Stored>> {
        let mut g = self.lock();
        g.touch(id);
        g.map.get(id).map(|e| e.stored.clone())
    }

    /// Forgets a response; `Some(session)` when its session should be released too.
    pub fn remove(&self, id: &str) -> Option<Option<String>> {
        let (_, freed) = self.lock().take(id)?;
        if let Some(w) = &self.writer {
            w.remove(id);
        }
        Some(freed)
    }

    /// Waits until every change is on disk.
    pub fn flush(&self) {
        if let Some(w) = &self.writer {
            w.flush();
        }
    }

    /// For `/v1/cache`.
    pub fn report(&self) -> Value {
        let g = self.lock();
        json!({
            "stored": g.map.len(),
            "bytes": g.bytes,
            "budget_bytes": self.budget,
            "expired": g.expired,
            "sessions": g.sessions.len(),
            "persisted": self.dir.is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(session: &str, pad: usize) -> Stored {
        Stored {
            response: json!({"pad": "x".repeat(pad)}),
            input_items: vec![],
            conversation: vec![],
            session: session.into(),
            created: 0,
        }
    }

    #[test]
    fn the_least_recently_used_expire_past_the_budget() {
        let one = persist::encode(&stored("a", 1000)).len() as u64;
        let s = ResponseStore::open(&ResponsesConfig {
            dir: None,
            budget_bytes: one * 2 + one / 2,
        });
        assert!(s.put("r1", stored("a", 1000)).is_empty());
        assert!(s.put("r2", stored("b", 1000)).is_empty());
        s.get("r1"); // r2 is now the oldest
        let freed = s.put("r3", stored("c", 1000));
        assert_eq!(freed, vec!["b".to_string()]);
        assert!(s.get("r2").is_none() && s.get("r1").is_some());
        assert_eq!(s.report()["expired"], 1);
        // a session is released only with the last response naming it
        s.put("r4", stored("a", 10));
        assert_eq!(s.remove("r1"), Some(None));
        assert_eq!(s.remove("r4"), Some(Some("a".to_string())));
        assert_eq!(s.remove("r4"), None);
    }
}

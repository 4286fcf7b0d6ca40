//! Admitting a run: the budget priced, the session (created, or the one to continue), the
//! agent checked, seed 000's priority (pausing or refusing), the run lock; and the
//! `user-prompt-submit` hooks.

use chrono::{DateTime, Utc};

use crate::agent::error::RunError;
use crate::agent::runtime::{RunRequest, Runtime};
use crate::hooks::{self, About, Hook, HookEvent};
use crate::permissions::load_policy;
use crate::protocol::SessionStatus;

use super::{Admitted, Confinement, Creating, discard, settle};

/// How a machine confines commands, in the result's words.
fn mechanism(machine: &crate::tools::confine::Machine) -> &'static str {
    match machine.mechanism {
        Some(crate::sandbox::Mechanism::Namespaces) => "namespaces",
        Some(crate::sandbox::Mechanism::Landlock) => "landlock",
        _ => "none",
    }
}

/// The session a run is admitted to: one to continue, or one being created under the id it
/// was given.
enum Target {
    Resume(String),
    Create(String, Creating),
}

/// The session a run is admitted for, and its agent.
struct Seat<'a> {
    session_id: &'a str,
    agent_name: &'a str,
    def: Option<&'a crate::config::AgentDef>,
    resumed: bool,
}

/// What taking a place on the session stack gave: the priority, why it is an emergency, the
/// stack, and the run lock a new session came with.
type Taken = (
    Option<u8>,
    Option<String>,
    Option<crate::queue::priority::Coordinator>,
    Option<crate::queue::RunGuard>,
);

impl Runtime {
    /// Admits a run: its provider and budget, the agent and its rules (a broken permission
    /// file stops it here), the session (created, or the one to continue), seed 000's priority
    /// (pausing or refusing), and the session's run lock.
    pub(in crate::agent) async fn admit(
        &self,
        request: &mut RunRequest,
    ) -> Result<Admitted, RunError> {
        let provider = self.provider()?;
        // A sandbox that is required and cannot be had stops it too: never a run that does
        // nothing and reports success.
        let sandbox = self.sandbox_in_force().await?;
        // A budget nop cannot count against stops the run before anything happens.
        crate::agent::meter::Meter::new(&self.config, provider.model())
            .check_priced()
            .map_err(|e| RunError::Agent(e.to_string()))?;
        let now = Utc::now();
        let target = self.target(request, now);
        let checked = self.check_agent(&target, request).await;
        let (session_id, resumed, mut creating) = match target {
            Target::Resume(id) => (id, true, None),
            Target::Create(id, task) => (id, false, Some(task)),
        };
        let (agents, agent_name) = match checked {
            Ok(checked) => checked,
            Err(e) => {
                if !resumed {
                    // Made a moment ago for this run only.
                    discard(&self.store, &session_id, &mut creating).await;
                }
                return Err(e);
            }
        };
        let def = agents.get(&agent_name).cloned();
        let seat = Seat {
            session_id: &session_id,
            agent_name: &agent_name,
            def: def.as_ref(),
            resumed,
        };
        let (priority, emergency, coordinator, guard) = self
            .take_priority(&seat, &agents, request, &mut creating)
            .await?;
        let guard = match (request.guard.take(), resumed) {
            (Some(taken), _) => Some(taken),
            (None, true) => match crate::queue::RunGuard::try_acquire(&self.store.dir(&session_id))
            {
                Ok(Some(guard)) => Some(guard),
                Ok(None) => return Err(RunError::Busy(session_id)),
                Err(e) => return Err(RunError::Agent(e.to_string())),
            },
            // A new session's run lock comes with it.
            (None, false) => guard,
        };
        Ok(Admitted {
            session_id,
            sandbox,
            resumed,
            agent_name,
            def,
            priority,
            emergency,
            coordinator,
            provider,
            now,
            creating,
            guard,
        })
    }

    /// The session the run is for: the one it names, or a new one, written (four fsyncs) while
    /// the run is checked and opened, on a thread of its own at once (a spawned task would wait
    /// for this one to yield); its first write waits for it, and a run refused removes it again.
    fn target(&self, request: &RunRequest, now: DateTime<Utc>) -> Target {
        match &request.session {
            Some(id) => Target::Resume(id.clone()),
            None => {
                let (store, agent) = (self.store.clone(), self.new_agent(request));
                let id = store.unused_id();
                let named = id.clone();
                Target::Create(
                    id,
                    tokio::task::spawn_blocking(move || store.create_running(&named, &agent, now)),
                )
            }
        }
    }

    /// How this run's commands are confined (`namespaces`, `landlock`, `none`, `off`), or why
    /// it may not start: `sandbox: required` where this machine cannot enforce it. Only then is
    /// the machine probed before the run goes on; otherwise the probe (a copy of the helper and
    /// a process started, once per process: tens of milliseconds) runs beside the run, and its
    /// answer is read when the run ends.
    async fn sandbox_in_force(&self) -> Result<Confinement, RunError> {
        let settings = crate::tools::SandboxSettings::from_config(&self.config);
        if settings.mode == crate::config::SandboxMode::Off {
            return Ok(tokio::spawn(async { "off" }));
        }
        let probed = settings.clone();
        let probe =
            tokio::task::spawn_blocking(move || crate::tools::confine::Machine::probe(&probed));
        if settings.mode != crate::config::SandboxMode::Required {
            return Ok(tokio::spawn(async move {
                match probe.await {
                    Ok(Ok(machine)) => mechanism(&machine),
                    _ => "none",
                }
            }));
        }
        let machine = probe
            .await
            .map_err(|e| RunError::Agent(e.to_string()))?
            .map_err(|e| RunError::Sandbox(e.to_string()))?;
        if let Some(refusal) = machine.refusal(&settings) {
            tracing::error!(op = "sandbox", result = "refused", "{refusal}");
            return Err(RunError::Sandbox(format!(
                "{refusal}; the run did not start (set `sandbox: best-effort` to run with what \
                 this machine has)"
            )));
        }
        let name = mechanism(&machine);
        Ok(tokio::spawn(async move { name }))
    }

    /// The agent a new session gets: the one asked for, else `agent.default`.
    fn new_agent(&self, request: &RunRequest) -> String {
        request
            .agent
            .clone()
            .unwrap_or_else(|| self.config.agent.default.clone())
    }

    /// The agents, and the run's agent, if it may run: its permission files load (a broken one
    /// stops the run before anything happens: fail closed) and a new session may use it.
    async fn check_agent(
        &self,
        target: &Target,
        request: &RunRequest,
    ) -> Result<(crate::config::AgentsFile, String), RunError> {
        let agents = self.ws.agents()?;
        let agent_name = match target {
            Target::Resume(id) => self.agent_of(id).await?,
            Target::Create(..) => self.new_agent(request),
        };
        load_policy(&self.ws.root, &agent_name)?;
        if let Target::Create(..) = target {
            agents
                .for_new_session(&agent_name, &self.ws.agents_path())
                .map_err(|e| RunError::Agent(e.to_string()))?;
        }
        Ok((agents, agent_name))
    }

    /// Seed 000: an agent with a priority takes its place on the user's session stack (its
    /// dynamic priority from `--emergency` or an emergency keyword of the prompt), which may
    /// pause a lower one or refuse this run; the others never wait. Returns the priority, why
    /// it is an emergency, the stack, and the run lock a new session came with.
    async fn take_priority(
        &self,
        seat: &Seat<'_>,
        agents: &crate::config::AgentsFile,
        request: &RunRequest,
        creating: &mut Option<Creating>,
    ) -> Result<Taken, RunError> {
        let minute = {
            use chrono::Timelike;
            let local = chrono::Local::now();
            local.hour() * 60 + local.minute()
        };
        let emergency = if request.emergency {
            Some("--emergency".to_string())
        } else {
            seat.def
                .zip(request.input.as_deref())
                .and_then(|(d, input)| d.emergency_keyword(input))
                .map(|k| format!("keyword \"{k}\""))
        };
        let priority = agents.effective_priority(
            seat.agent_name,
            &self.queue.user,
            minute,
            emergency.is_some(),
        );
        let emergency = emergency.filter(|_| priority.is_some());
        let coordinator = priority.map(|_| {
            crate::queue::priority::Coordinator::new(
                &self.ws.nop_dir(),
                &self.queue.user,
                std::time::Duration::from_secs_f64(self.config.queue.idle_timeout_s),
            )
        });
        let mut guard = None;
        if let (Some(coordinator), Some(priority)) = (&coordinator, priority) {
            let interruptible = seat.def.is_none_or(|d| d.interruptible);
            let session_id = seat.session_id;
            match coordinator.admit(session_id, seat.agent_name, priority, interruptible)? {
                crate::queue::priority::Admission::Admitted { paused } => {
                    // Seed 000 §3: the session stores the priority it runs with.
                    guard = settle(creating).await?;
                    let why = emergency.clone();
                    self.record(session_id, move |s| {
                        s.priority = Some(priority);
                        s.interruptible = Some(interruptible);
                        s.emergency = why;
                    })
                    .await?;
                    if let Some(p) = paused {
                        self.note_paused(&p, seat.agent_name).await;
                    }
                }
                crate::queue::priority::Admission::Refused { reason } => {
                    tracing::info!(agent = %seat.agent_name, op = "priority", result = "refused", "{reason}");
                    if !seat.resumed {
                        // The session was created a moment ago for this run only.
                        discard(&self.store, session_id, creating).await;
                    }
                    return Err(RunError::Refused(reason));
                }
            }
        }
        Ok((priority, emergency, coordinator, guard))
    }

    /// A session this run paused says so at once (its own run also records it at its next
    /// checkpoint, and `running` when it resumes).
    async fn note_paused(&self, paused: &crate::queue::priority::Entry, by: &str) {
        tracing::info!(session = %paused.session_id, agent = %paused.agent, op = "priority", result = "paused", by = %by, "paused for a higher-priority session");
        if let Err(e) = self
            .store
            .set_status_async(&paused.session_id, SessionStatus::Paused)
            .await
        {
            tracing::warn!(session = %paused.session_id, op = "priority", error = %e, "could not record the pause in its session.json");
        }
    }

    /// The `user-prompt-submit` hooks on the user's prompt: they may refuse it (the session made
    /// for it is removed, nothing is stored) or add context, given to the model after it.
    pub(in crate::agent) async fn submit_prompt(
        &self,
        admitted: &mut Admitted,
        request: &mut RunRequest,
    ) -> Result<(), RunError> {
        let Some(prompt) = request.input.clone() else {
            return Ok(());
        };
        if !hooks::configured(&self.config.hooks, Hook::UserPromptSubmit) {
            return Ok(());
        }
        // A hook may look at the session it is given.
        admitted.created().await?;
        let event = HookEvent::UserPromptSubmit {
            about: About {
                session_id: &admitted.session_id,
                agent: &admitted.agent_name,
            },
            prompt: &prompt,
        };
        let outcome = hooks::fire(&self.config.hooks, &self.ws.root, &event).await;
        match outcome {
            hooks::HookOutcome::Blocked(reason) => {
                if let Some(c) = &admitted.coordinator {
                    let _ = c.finish(&admitted.session_id);
                }
                // The session was created a moment ago for this prompt only.
                admitted.discard(&self.store).await;
                tracing::info!(session = %admitted.session_id, op = "hook", event = "user-prompt-submit", result = "blocked", "{reason}");
                Err(RunError::Refused(format!(
                    "a user-prompt-submit hook blocked the prompt: {reason}"
                )))
            }
            hooks::HookOutcome::Context(context) => {
                request.input = Some(format!("{prompt}\n\n{context}"));
                Ok(())
            }
            hooks::HookOutcome::Continue | hooks::HookOutcome::Allowed => Ok(()),
        }
    }
}

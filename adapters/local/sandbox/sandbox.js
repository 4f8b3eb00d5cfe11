// The decklog sandbox page: a small Slack client for the fake workspace decklog talks to.
//
// It reads the workspace from GET /sandbox/state, refetches it whenever /sandbox/events (Server-Sent Events fed
// by the workspace's change feed) says something changed, and sends what the person does to the POST
// /sandbox/… endpoints, which deliver it to decklog as signed Slack requests. No build step, no framework.

import { collectInputs, h, renderBlocks } from "./blocks.js";
import { escapeHtml, formatDate, mrkdwn, parsePermalink, plainText } from "./mrkdwn.js";

const REACTIONS = [
  ["pushpin", "📌", "add the message to the incident's timeline"],
  ["white_check_mark", "✅", "accept a suggestion"],
  ["x", "❌", "dismiss a suggestion"],
  ["eyes", "👀", "looking"],
  ["+1", "👍", ""],
  ["fire", "🔥", ""],
  ["tada", "🎉", ""],
];
const REACTION_GLYPH = Object.fromEntries(REACTIONS.map(([name, glyph]) => [name, glyph]));
const CHANNEL_HINTS = ["/incident declare ", "/incident list", "/incident help"];
const THREAD_HINTS = ["@decklog sev 1", "@decklog status mitigated", "@decklog ask what changed?", "@decklog timeline", "@decklog resolve"];
const TEXT_FILES = new Set(["md", "txt", "json", "csv", "markdown"]);

const app = {
  snap: null,
  version: -1,
  me: null,
  route: { view: "channel", channel: "C0ALERTS" },
  thread: null, // {channel, ts}
  highlight: null,
  dismissed: new Set(),
  seen: {},
  fetching: false,
  dirty: false,
};

const $ = (id) => document.getElementById(id);

// -- talking to the server ----------------------------------------------------------------------------------

// The per-run token the server embeds in the page; every POST carries it (a cross-site page cannot read it).
const TOKEN = document.querySelector('meta[name="decklog-sandbox-token"]')?.content || "";

async function post(path, body, node) {
  node?.classList.add("busy");
  try {
    const response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Decklog-Sandbox-Token": TOKEN },
      body: JSON.stringify(body),
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      toast(data.error || `HTTP ${response.status}`, "error");
      return null;
    }
    if (data.bot_status != null && data.bot_status !== 200) {
      toast(`decklog answered Slack with HTTP ${data.bot_status || "— (no answer)"}`, "warn");
    }
    refresh();
    return data;
  } catch (err) {
    toast(`could not reach decklog: ${err.message}`, "error");
    return null;
  } finally {
    node?.classList.remove("busy");
  }
}

async function refresh() {
  if (app.fetching) {
    app.dirty = true;
    return;
  }
  app.fetching = true;
  try {
    const response = await fetch("/sandbox/state", { cache: "no-store" });
    if (response.ok) {
      const snap = await response.json();
      if (snap.version >= app.version) {
        app.snap = snap;
        app.version = snap.version;
        render();
      }
    }
  } catch (err) {
    setLive(false);
  } finally {
    app.fetching = false;
    if (app.dirty) {
      app.dirty = false;
      refresh();
    }
  }
}

function connect() {
  const source = new EventSource("/sandbox/events");
  source.addEventListener("open", () => setLive(true));
  source.addEventListener("hello", () => {
    setLive(true);
    app.version = -1; // a new connection may be a restarted server, whose versions start again
    refresh();
  });
  source.addEventListener("change", () => refresh());
  source.addEventListener("error", () => setLive(false));
}

function setLive(on) {
  $("live-dot").classList.toggle("on", on);
  $("live-label").textContent = on ? "live" : "reconnecting…";
}

function toast(text, level = "info") {
  const node = h("div", { class: `toast ${level}`, role: level === "error" ? "alert" : "status" }, text);
  $("toasts").append(node);
  setTimeout(() => node.remove(), level === "error" ? 9000 : 6000);
}

// -- lookups ------------------------------------------------------------------------------------------------

function people() {
  return Object.values(app.snap?.people || {}).map((p) => p.user);
}

function humans() {
  return people().filter((u) => !u.is_bot);
}

function rooms() {
  return (app.snap?.channels || []).filter((c) => !c.is_im);
}

function room(id) {
  return rooms().find((c) => c.id === id);
}

function mdContext() {
  const users = Object.fromEntries(people().map((u) => [u.id, u.name]));
  const channels = Object.fromEntries(rooms().map((c) => [c.id, c.name]));
  return { users, channels, me: app.me };
}

function myself() {
  return app.snap?.people?.[app.me] || { ephemerals: [], modals: [], home: null };
}

function displayName(message) {
  if (message.bot_id || !message.user) return app.snap?.bot?.name || "decklog"; // ephemerals come from the app
  const person = app.snap?.people?.[message.user]?.user;
  return person?.real_name || person?.name || message.user || "someone";
}

function tsDate(ts) {
  return new Date(Number(String(ts).split(".")[0]) * 1000);
}

function findMessage(channelId, ts) {
  const channel = room(channelId);
  if (!channel) return null;
  for (const message of channel.messages) {
    if (message.ts === ts) return message;
    for (const reply of message.replies || []) if (reply.ts === ts) return reply;
  }
  return null;
}

// -- rendering helpers --------------------------------------------------------------------------------------

/** Keyed children: a node is rebuilt only when its signature changed (keeps selects and inputs stable). */
function reconcile(container, items) {
  const cache = container._cache || new Map();
  const next = new Map();
  let previous = null;
  for (const item of items) {
    let entry = cache.get(item.key);
    if (!entry || entry.sig !== item.sig) entry = { sig: item.sig, node: item.build() };
    next.set(item.key, entry);
    const wanted = previous ? previous.nextSibling : container.firstChild;
    if (wanted !== entry.node) container.insertBefore(entry.node, wanted);
    previous = entry.node;
  }
  let stale = previous ? previous.nextSibling : container.firstChild;
  while (stale) {
    const following = stale.nextSibling;
    stale.remove();
    stale = following;
  }
  container._cache = next;
}

function blockContext(target) {
  return {
    md: mdContext(),
    people: humans().map((u) => ({ id: u.id, name: u.real_name || u.name })),
    rooms: rooms().map((c) => ({ id: c.id, name: c.name })),
    errors: target.errors || null,
    confirm: confirmDialog,
    open: openUrl,
    act: (element, value, kind, node) => {
      const body = { user: app.me, action_id: element.action_id, value, kind };
      if (target.view_id) body.view_id = target.view_id;
      else Object.assign(body, { channel: target.channel, ts: target.ts });
      return post("/sandbox/action", body, node);
    },
  };
}

function openUrl(url) {
  const perma = parsePermalink(url);
  if (perma) goToMessage(perma);
  else window.open(url, "_blank", "noopener,noreferrer");
}

function confirmDialog(confirm) {
  return new Promise((resolve) => {
    const close = (answer) => {
      overlay.remove();
      resolve(answer);
    };
    const overlay = h(
      "div",
      { class: "overlay confirm-overlay" },
      h(
        "div",
        { class: "dialog confirm", role: "alertdialog", "aria-modal": "true" },
        h("div", { class: "dialog-title", html: plainText(confirm.title || { text: "Are you sure?" }) }),
        h("div", { class: "dialog-body bk-text", html: confirm.text?.type === "mrkdwn" ? mrkdwn(confirm.text.text, mdContext()) : plainText(confirm.text || "") }),
        h(
          "div",
          { class: "dialog-actions" },
          h("button", { type: "button", class: "bk-button", onclick: () => close(false) }, confirm.deny?.text || "Cancel"),
          h("button", { type: "button", class: `bk-button ${confirm.style === "danger" ? "danger" : "primary"}`, onclick: () => close(true) }, confirm.confirm?.text || "Yes"),
        ),
      ),
    );
    $("popover-root").append(overlay);
  });
}

function avatar(message) {
  const fromApp = message.bot_id || !message.user;
  const node = h("div", { class: `avatar${fromApp ? " bot" : ""}` }, fromApp ? "🗂️" : displayName(message)[0]?.toUpperCase() || "?");
  if (!fromApp) {
    const hue = [...(message.user || "x")].reduce((a, c) => (a * 31 + c.charCodeAt(0)) % 360, 7);
    node.style.backgroundColor = `hsl(${hue} 45% 42%)`; // CSSOM, allowed by the page's CSP (no inline styles)
  }
  return node;
}

function fileCard(file) {
  const href = `/sandbox/files/${encodeURIComponent(file.id)}/${encodeURIComponent(file.name)}`;
  const preview = h("div", { class: "file-preview", hidden: true });
  const kind = String(file.filetype || "").toLowerCase();
  const toggle = h("button", { type: "button", class: "link-button" }, "Preview");
  toggle.addEventListener("click", async () => {
    if (!preview.hidden) {
      preview.hidden = true;
      toggle.textContent = "Preview";
      return;
    }
    preview.replaceChildren();
    if (kind === "html") {
      preview.append(h("iframe", { src: href, sandbox: "", title: file.title || file.name }));
    } else {
      const text = await (await fetch(href)).text();
      preview.append(h("pre", { class: "pre" }, text));
    }
    preview.hidden = false;
    toggle.textContent = "Hide";
  });
  const size = file.size > 1024 ? `${(file.size / 1024).toFixed(1)} KB` : `${file.size} B`;
  return h(
    "div",
    { class: "file", "data-file": file.id },
    h("div", { class: "file-icon" }, "📄"),
    h(
      "div",
      { class: "file-body" },
      h("a", { class: "file-name", href, target: "_blank", rel: "noopener" }, file.title || file.name),
      h("div", { class: "file-meta" }, `${(file.pretty_type || kind).toUpperCase()} · ${size} · ${file.name}`),
      TEXT_FILES.has(kind) || kind === "html" ? toggle : null,
      preview,
    ),
  );
}

function reactionsRow(message, channel) {
  const row = h("div", { class: "reactions" });
  for (const reaction of message.reactions || []) {
    const mine = reaction.users.includes(app.me);
    const who = reaction.users.map((id) => app.snap.people[id]?.user?.name || id).join(", ");
    const glyph = REACTION_GLYPH[reaction.name] || plainText(`:${reaction.name}:`);
    row.append(
      h("button", {
        type: "button",
        class: `reaction${mine ? " mine" : ""}`,
        title: `${who} reacted with :${reaction.name}:`,
        "data-reaction": reaction.name,
        html: `${glyph} <span class="count">${reaction.count}</span>`,
        onclick: (event) =>
          post("/sandbox/reaction", { user: app.me, channel, ts: message.ts, name: reaction.name, remove: mine }, event.currentTarget),
      }),
    );
  }
  return row;
}

function reactionPicker(anchor, channel, ts) {
  closePopovers();
  const box = h("div", { class: "popover reaction-picker", role: "menu" });
  for (const [name, glyph, hint] of REACTIONS) {
    box.append(
      h(
        "button",
        {
          type: "button",
          class: "pick",
          title: hint ? `:${name}: — ${hint}` : `:${name}:`,
          "data-reaction": name,
          onclick: () => {
            closePopovers();
            post("/sandbox/reaction", { user: app.me, channel, ts, name });
          },
        },
        glyph,
      ),
    );
  }
  const rect = anchor.getBoundingClientRect();
  box.style.top = `${Math.max(8, rect.top - 48)}px`;
  box.style.left = `${Math.max(8, rect.right - 260)}px`;
  $("popover-root").append(box);
}

function closePopovers() {
  for (const node of document.querySelectorAll(".popover")) node.remove();
}

function messageNode(message, { channel, inThread = false, ephemeral = false }) {
  const isRich = (message.blocks || []).length && message.blocks.every((b) => b.type === "rich_text");
  let content;
  if (message.subtype === "tombstone") content = h("div", { class: "muted" }, "This message was deleted.");
  else if (message.blocks?.length && !isRich) {
    const target = { channel, ts: message.ts };
    content = renderBlocks(message.blocks, blockContext(target));
  } else content = h("div", { class: "bk-text", html: mrkdwn(message.text, mdContext()) });
  const when = tsDate(message.ts);
  const meta = h(
    "div",
    { class: "meta" },
    h("span", { class: "name" }, displayName(message)),
    message.bot_id || !message.user ? h("span", { class: "badge" }, "APP") : null,
    h("time", { class: "time", datetime: when.toISOString(), title: when.toString() }, formatDate("{time}", when)),
    message.edited ? h("span", { class: "edited muted" }, "(edited)") : null,
    ephemeral ? h("span", { class: "only-you" }, "👁 Only visible to you") : null,
  );
  const body = h(
    "div",
    { class: "body" },
    meta,
    h("div", { class: "content" }, content),
    (message.attachments || []).map((a) =>
      h("div", { class: "attachment", html: mrkdwn(a.text || a.fallback || "", mdContext()) }),
    ),
    (message.files || []).map(fileCard),
    ephemeral ? null : reactionsRow(message, channel),
  );
  if (!inThread && !ephemeral && message.reply_count) {
    const last = message.latest_reply ? tsDate(message.latest_reply) : null;
    body.append(
      h(
        "button",
        { type: "button", class: "replies", onclick: () => openThread(channel, message.ts) },
        `${message.reply_count} ${message.reply_count === 1 ? "reply" : "replies"}`,
        last ? h("span", { class: "muted" }, ` · last reply ${formatDate("{time}", last)}`) : null,
      ),
    );
  }
  const actions = h("div", { class: "hover-actions" });
  if (ephemeral) {
    actions.append(
      h("button", { type: "button", class: "icon-button", title: "Dismiss", onclick: () => { app.dismissed.add(message.ts); render(); } }, "✕"),
    );
  } else if (message.subtype !== "tombstone") {
    actions.append(
      h("button", { type: "button", class: "icon-button react", title: "Add reaction", "aria-label": "Add reaction", onclick: (e) => reactionPicker(e.currentTarget, channel, message.ts) }, "☺+"),
    );
    if (!inThread) {
      actions.append(
        h("button", { type: "button", class: "icon-button reply", title: "Reply in thread", "aria-label": "Reply in thread", onclick: () => openThread(channel, message.ts) }, "💬"),
      );
    }
  }
  return h(
    "div",
    {
      class: `msg${message.bot_id ? " from-bot" : ""}${ephemeral ? " ephemeral" : ""}`,
      "data-ts": message.ts,
      "data-channel": channel,
    },
    avatar(message),
    body,
    actions,
  );
}

function messageItems(list, channel, options = {}) {
  return list.map(({ message, ephemeral }) => ({
    key: `${ephemeral ? "e" : "m"}:${message.ts}`,
    sig: JSON.stringify([message, app.me, options.inThread || false]),
    build: () => messageNode(message, { channel, ephemeral, ...options }),
  }));
}

// -- panes --------------------------------------------------------------------------------------------------

function renderSidebar() {
  const select = $("user-select");
  const options = humans().map((u) => `${u.id}:${u.real_name}`).join("|");
  if (select.dataset.options !== options) {
    select.replaceChildren(...humans().map((u) => h("option", { value: u.id }, `${u.name} (${u.real_name})`)));
    select.dataset.options = options;
  }
  select.value = app.me;
  $("workspace-name").textContent = app.snap.team?.name || "decklog sandbox";
  $("nav-home").classList.toggle("active", app.route.view === "home");
  reconcile(
    $("channel-list"),
    rooms().map((channel) => {
      const count = channel.messages.length;
      if (app.seen[channel.id] === undefined || (app.route.view === "channel" && app.route.channel === channel.id)) {
        app.seen[channel.id] = count;
      }
      const unread = count - app.seen[channel.id];
      const active = app.route.view === "channel" && app.route.channel === channel.id;
      return {
        key: channel.id,
        sig: JSON.stringify([channel.name, unread, active]),
        build: () =>
          h(
            "button",
            {
              type: "button",
              class: `nav-item channel-item${active ? " active" : ""}${unread ? " unread" : ""}`,
              "data-channel": channel.id,
              onclick: () => goToChannel(channel.id),
            },
            `# ${channel.name}`,
            unread ? h("span", { class: "unread-count" }, String(unread)) : null,
          ),
      };
    }),
  );
  renderTools();
}

function renderTools() {
  const info = app.snap.sandbox || {};
  const deploy = info.deploy || {};
  const history = (deploy.history || [])
    .map((d) => `<li><code>${escapeHtml(d.version)}</code> <span class="muted">${escapeHtml(d.kind)} by ${escapeHtml(d.author)}</span></li>`)
    .join("");
  const html =
    `<div><b>${escapeHtml(deploy.service || "payments")}</b> is at <code>${escapeHtml(deploy.current || "—")}</code></div>` +
    `<ul class="deploys">${history}</ul>` +
    `<div class="muted">fake deploy service ${escapeHtml(deploy.url || "")}` +
    `${deploy.used_by_actions ? " · the rollback_deploy action runs here" : ""}</div>` +
    ((info.approvers || []).length
      ? `<div class="muted">approvers: ${info.approvers.map((id) => escapeHtml(app.snap.people[id]?.user?.name || id)).join(", ")}</div>`
      : "");
  if ($("deploy-info").dataset.html !== html) {
    $("deploy-info").innerHTML = html;
    $("deploy-info").dataset.html = html;
  }
  const receivers = info.receivers || {};
  const token = info.alert_token ? escapeHtml(info.alert_token) : "$DECKLOG_ALERT_TOKEN";
  const origin = escapeHtml(location.origin);
  const receiverHtml =
    `<p>Sample alert → <code>/alerts/alertmanager</code> (${receivers.alerts ? "installed" : "not installed yet: declared through core"}); ` +
    `sample deploy → <code>/changes/generic</code> (${receivers.changes ? "installed" : "not installed yet"}).</p>` +
    `<p>Send your own (<code>?wait=5</code> answers where it went; without it, a 202 with a receipt):</p><pre class="pre">curl -X POST '${origin}/alerts/generic?wait=5' \\\n  -H 'Authorization: Bearer ${token}' \\\n` +
    `  -H 'Content-Type: application/json' \\\n  -d '{"title": "disk full on db-1", "fingerprint": "disk-full-db-1", "service": "db", "severity": "high"}'</pre>`;
  if ($("receiver-info").dataset.html !== receiverHtml) {
    $("receiver-info").innerHTML = receiverHtml;
    $("receiver-info").dataset.html = receiverHtml;
  }
}

function renderChannel() {
  const channel = room(app.route.channel) || rooms()[0];
  if (!channel) return;
  app.route.channel = channel.id;
  const botHere = channel.members.includes(app.snap.bot.user_id);
  $("pane-title").textContent = `# ${channel.name}`;
  $("pane-subtitle").textContent =
    `${channel.members.length} members` + (botHere ? " · decklog is here" : " · decklog is not in this channel and hears nothing here");
  $("composer-input").placeholder = `Message #${channel.name} — try /incident declare Checkout is slow sev2`;
  const mine = myself().ephemerals.filter((e) => e.channel === channel.id && !e.thread_ts && !app.dismissed.has(e.ts));
  const list = [
    ...channel.messages.map((message) => ({ message, ephemeral: false })),
    ...mine.map((message) => ({ message, ephemeral: true })),
  ].sort((a, b) => Number(a.message.ts) - Number(b.message.ts));
  const box = $("messages");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 120 || box.dataset.channel !== channel.id;
  reconcile(box, messageItems(list, channel.id));
  if (!list.length) box.replaceChildren(h("div", { class: "empty muted" }, `This is the very beginning of #${channel.name}.`));
  if (atBottom) box.scrollTop = box.scrollHeight;
  box.dataset.channel = channel.id;
}

function renderThread() {
  const pane = $("thread");
  if (!app.thread) {
    pane.hidden = true;
    return;
  }
  const parent = findMessage(app.thread.channel, app.thread.ts);
  if (!parent) {
    pane.hidden = true;
    return;
  }
  pane.hidden = false;
  pane.dataset.ts = parent.ts;
  $("thread-channel").textContent = `# ${room(app.thread.channel)?.name || ""}`;
  const mine = myself().ephemerals.filter((e) => e.channel === app.thread.channel && e.thread_ts === parent.ts && !app.dismissed.has(e.ts));
  const list = [
    { message: parent, ephemeral: false },
    ...(parent.replies || []).map((message) => ({ message, ephemeral: false })),
    ...mine.map((message) => ({ message, ephemeral: true })),
  ].sort((a, b) => Number(a.message.ts) - Number(b.message.ts));
  const box = $("thread-messages");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 120 || box.dataset.ts !== parent.ts;
  reconcile(box, messageItems(list, app.thread.channel, { inThread: true }));
  if (atBottom) box.scrollTop = box.scrollHeight;
  box.dataset.ts = parent.ts;
}

function renderHome() {
  const home = myself().home;
  $("pane-title").textContent = "decklog";
  $("pane-subtitle").textContent = "App Home";
  const pane = $("home-pane");
  const sig = JSON.stringify([home, app.me]);
  if (pane.dataset.sig === sig) return;
  pane.dataset.sig = sig;
  pane.replaceChildren(
    home ? renderBlocks(home.blocks, blockContext({ view_id: home.id })) : h("div", { class: "empty muted" }, "Opening decklog's Home tab…"),
  );
}

function renderModal() {
  const root = $("modal-root");
  const stack = myself().modals || [];
  const view = stack[stack.length - 1];
  if (!view) {
    root.replaceChildren();
    root._sig = null;
    return;
  }
  const sig = JSON.stringify([view.id, view.hash, view.errors, app.me]);
  if (root._sig === sig) return;
  const previous = root.querySelector(".dialog");
  const dialog = modalNode(view);
  if (previous && previous.dataset.viewId === view.id) restoreInputs(previous, dialog);
  root.replaceChildren(h("div", { class: "overlay" }, dialog));
  root._sig = sig;
}

function modalNode(view) {
  const blocks = renderBlocks(view.blocks, blockContext({ view_id: view.id, errors: view.errors }));
  const form = h("form", { class: "dialog modal", role: "dialog", "aria-modal": "true", "data-view-id": view.id });
  const close = () => post("/sandbox/view/close", { user: app.me, view_id: view.id });
  form.append(
    h("div", { class: "dialog-title" }, h("span", { html: plainText(view.title) }), h("button", { type: "button", class: "icon-button", "aria-label": "Close", onclick: close }, "✕")),
    h("div", { class: "dialog-body" }, blocks),
    h(
      "div",
      { class: "dialog-actions" },
      h("button", { type: "button", class: "bk-button", onclick: close }, view.close?.text || "Cancel"),
      view.submit ? h("button", { type: "submit", class: "bk-button primary" }, view.submit.text) : null,
    ),
  );
  form.addEventListener("input", (event) => {
    const input = event.target.closest(".bk-input");
    if (!input) return;
    input.classList.remove("has-error");
    input.querySelector(".bk-error").textContent = "";
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const { values, missing } = collectInputs(form);
    for (const node of form.querySelectorAll(".bk-input")) {
      const isMissing = missing.includes(node.dataset.blockId);
      if (isMissing) node.querySelector(".bk-error").textContent = "Please complete this required field.";
      node.classList.toggle("has-error", isMissing || Boolean(view.errors?.[node.dataset.blockId]));
    }
    if (missing.length) return;
    post("/sandbox/view/submit", { user: app.me, view_id: view.id, values }, form.querySelector("[type=submit]"));
  });
  return form;
}

function restoreInputs(from, to) {
  for (const node of to.querySelectorAll(".bk-input")) {
    const old = from.querySelector(`.bk-input[data-block-id="${CSS.escape(node.dataset.blockId)}"]`);
    if (!old) continue;
    const fresh = node.querySelectorAll("input, select, textarea");
    const stale = old.querySelectorAll("input, select, textarea");
    fresh.forEach((field, i) => {
      const was = stale[i];
      if (!was) return;
      if (field.type === "checkbox" || field.type === "radio") field.checked = was.checked;
      else if (field.multiple) for (const option of field.options) option.selected = [...was.selectedOptions].some((o) => o.value === option.value);
      else field.value = was.value;
    });
  }
}

function renderHints() {
  const chips = (box, hints, input) => {
    if (box.dataset.done) return;
    box.dataset.done = "1";
    box.append(h("span", { class: "muted" }, "Try: "));
    for (const hint of hints) {
      box.append(
        h("button", {
          type: "button",
          class: "chip",
          onclick: () => {
            input.value = hint;
            input.focus();
          },
        }, hint.trim()),
      );
    }
  };
  chips($("composer-hints"), CHANNEL_HINTS, $("composer-input"));
  chips($("thread-hints"), THREAD_HINTS, $("thread-input"));
}

function render() {
  if (!app.snap) return;
  if (!app.me || !app.snap.people[app.me]) app.me = humans()[0]?.id;
  renderSidebar();
  const home = app.route.view === "home";
  $("channel-pane").hidden = home;
  $("home-pane").hidden = !home;
  if (home) renderHome();
  else renderChannel();
  renderThread();
  renderModal();
  renderHints();
  document.body.dataset.version = String(app.version);
  if (app.highlight) {
    const node = document.querySelector(`.msg[data-ts="${CSS.escape(app.highlight)}"]`);
    if (node) {
      node.scrollIntoView({ block: "center" });
      node.classList.add("flash");
      setTimeout(() => node.classList.remove("flash"), 2000);
      app.highlight = null;
    }
  }
}

// -- navigation ---------------------------------------------------------------------------------------------

function writeHash() {
  const hash =
    app.route.view === "home"
      ? "#home"
      : `#${app.route.channel}${app.thread && app.thread.channel === app.route.channel ? `/${app.thread.ts}` : ""}`;
  if (location.hash !== hash) history.replaceState(null, "", hash);
}

function readHash() {
  const hash = location.hash.slice(1);
  if (hash === "home") app.route = { view: "home" };
  else if (hash) {
    const [channel, ts] = hash.split("/");
    app.route = { view: "channel", channel };
    app.thread = ts ? { channel, ts } : app.thread;
  }
}

function goToChannel(channel) {
  app.route = { view: "channel", channel };
  if (app.thread && app.thread.channel !== channel) app.thread = null;
  writeHash();
  render();
  $("composer-input").focus();
}

function goHome() {
  app.route = { view: "home" };
  writeHash();
  render();
  post("/sandbox/home", { user: app.me });
}

function openThread(channel, ts) {
  app.thread = { channel, ts };
  if (app.route.view !== "channel" || app.route.channel !== channel) app.route = { view: "channel", channel };
  writeHash();
  render();
  $("thread-input").focus();
}

function goToMessage({ channel, ts, thread_ts }) {
  const message = findMessage(channel, ts);
  const root = thread_ts || (message && message.thread_ts && message.thread_ts !== ts ? message.thread_ts : null);
  app.highlight = ts;
  if (root) openThread(channel, root);
  else if (message?.reply_count) openThread(channel, ts);
  else goToChannel(channel);
}

// -- input --------------------------------------------------------------------------------------------------

function wireComposer(form, input, context) {
  const send = async () => {
    const text = input.value.trim();
    if (!text) return;
    const where = context();
    if (!where) return;
    const result = await post("/sandbox/message", { user: app.me, text, ...where }, form);
    if (result) {
      input.value = "";
      if (result.command && result.in_thread) {
        toast("Slack sends a slash command with its channel only: the answer is in the channel. In a thread, use @decklog …");
      }
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
}

async function sample(path, body, node, describe) {
  const result = await post(path, body, node);
  if (!result) return;
  toast(describe(result) + (result.note ? ` — ${result.note}` : ""), result.ok ? "info" : "warn");
}

function wire() {
  wireComposer($("composer"), $("composer-input"), () => ({ channel: app.route.channel }));
  wireComposer($("thread-composer"), $("thread-input"), () => app.thread && { channel: app.thread.channel, thread_ts: app.thread.ts });
  $("thread-close").addEventListener("click", () => {
    app.thread = null;
    writeHash();
    render();
  });
  $("nav-home").addEventListener("click", goHome);
  $("user-select").addEventListener("change", (event) => {
    app.me = event.target.value;
    localStorage.setItem("decklog-sandbox-user", app.me);
    render();
    if (app.route.view === "home") post("/sandbox/home", { user: app.me });
  });
  $("new-channel").addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = $("new-channel-name").value.trim();
    if (!name) return;
    const result = await post("/sandbox/channel", { user: app.me, name });
    if (result) {
      $("new-channel-name").value = "";
      goToChannel(result.channel);
    }
  });
  $("sample-alert").addEventListener("click", (e) =>
    sample("/sandbox/sample/alert", { status: "firing" }, e.currentTarget, (r) => `Sample alert sent via ${r.via}: HTTP ${r.status}`),
  );
  $("sample-resolve").addEventListener("click", (e) =>
    sample("/sandbox/sample/alert", { status: "resolved" }, e.currentTarget, (r) => `Alert resolution sent via ${r.via}: HTTP ${r.status}`),
  );
  $("sample-deploy").addEventListener("click", (e) =>
    sample("/sandbox/sample/deploy", { user: app.me }, e.currentTarget, (r) => {
      const version = r.response?.deploy?.version || r.response?.version || "";
      return `Deploy ${version} recorded; decklog told via ${r.via}: HTTP ${r.status}`;
    }),
  );
  document.addEventListener("click", (event) => {
    if (!event.target.closest(".popover, .react")) closePopovers();
    const link = event.target.closest("a.channel-link, a.permalink");
    if (!link) return;
    event.preventDefault();
    if (link.classList.contains("channel-link")) goToChannel(link.dataset.channel);
    else goToMessage({ channel: link.dataset.channel, ts: link.dataset.ts, thread_ts: link.dataset.threadTs || null });
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    const deny = document.querySelector(".confirm-overlay .dialog-actions button");
    if (deny) {
      deny.click(); // the confirmation's deny button
      return;
    }
    if (document.querySelector(".popover")) {
      closePopovers();
      return;
    }
    const modal = document.querySelector("#modal-root .dialog");
    if (modal) post("/sandbox/view/close", { user: app.me, view_id: modal.dataset.viewId });
  });
  window.addEventListener("hashchange", () => {
    readHash();
    render();
  });
  setInterval(() => {
    for (const node of document.querySelectorAll("time[data-epoch]")) {
      node.textContent = formatDate(node.dataset.format, new Date(Number(node.dataset.epoch) * 1000));
    }
  }, 30000);
}

function start() {
  const params = new URLSearchParams(location.search);
  const wanted = params.get("user") || localStorage.getItem("decklog-sandbox-user") || "alice";
  app.me = wanted.startsWith("U") ? wanted : `U0${wanted.toUpperCase()}`;
  readHash();
  wire();
  connect();
  refresh().then(() => {
    const byName = humans().find((u) => u.name === wanted || u.id === wanted);
    if (byName) app.me = byName.id;
    render();
    if (app.route.view === "home") post("/sandbox/home", { user: app.me });
  });
}

start();

// Slack's mrkdwn and text objects as HTML, for the decklog sandbox page.
//
// Every literal character is HTML-escaped; only the markup this module writes is HTML. Handled: *bold*,
// _italic_, ~strike~, `code`, ```pre```, > quotes, <url|text>, <@U…> mentions, <#C…> channels,
// <!here>/<!channel>, <!date^…|fallback>, :emoji: shortcodes (the ones decklog uses, and a few more).

export const EMOJI = {
  red_circle: "🔴", large_orange_circle: "🟠", large_yellow_circle: "🟡", large_blue_circle: "🔵",
  white_circle: "⚪", mag: "🔍", dart: "🎯", adhesive_bandage: "🩹", eyes: "👀", white_check_mark: "✅",
  heavy_check_mark: "✔️", rotating_light: "🚨", robot_face: "🤖", bulb: "💡", scales: "⚖️", no_entry: "⛔",
  no_entry_sign: "🚫", link: "🔗", clipboard: "📋", raised_hand: "✋", hourglass: "⌛", gear: "⚙️",
  grey_question: "❔", warning: "⚠️", heavy_minus_sign: "➖", double_vertical_bar: "⏸️", x: "❌",
  negative_squared_cross_mark: "❎", leftwards_arrow_with_hook: "↩️", shield: "🛡️", package: "📦",
  fire: "🔥", sunny: "☀️", pushpin: "📌", round_pushpin: "📍", boom: "💥", "+1": "👍", thumbsup: "👍",
  "-1": "👎", tada: "🎉", memo: "📝", rocket: "🚀", bell: "🔔", checkered_flag: "🏁", chart_with_upwards_trend: "📈",
  speech_balloon: "💬", hammer_and_wrench: "🛠️", information_source: "ℹ️", arrow_right: "➡️", ok_hand: "👌",
  heart: "❤️", pray: "🙏", wave: "👋", construction: "🚧", lock: "🔒", page_facing_up: "📄",
};

const HTML_ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
}

/** Slack escapes only &, < and > in message text; undo that (in the right order). */
export function decodeSlack(text) {
  return String(text ?? "").replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

export function emojiHtml(name) {
  const glyph = EMOJI[name];
  return glyph ? `<span class="emoji" title=":${escapeHtml(name)}:">${glyph}</span>` : null;
}

/** A plain_text object (or a string) as HTML: escaped, emoji shortcodes replaced unless emoji is false. */
export function plainText(obj) {
  const text = typeof obj === "string" ? obj : obj?.text ?? "";
  let html = escapeHtml(text);
  if (!(typeof obj === "object" && obj && obj.emoji === false)) {
    html = html.replace(/:([a-z0-9_+'-]+):/g, (m, name) => emojiHtml(name) ?? m);
  }
  return html.replace(/\n/g, "<br>");
}

/** A text object of either type. */
export function textObject(obj, ctx) {
  if (!obj) return "";
  return obj.type === "mrkdwn" ? mrkdwn(obj.text, ctx) : plainText(obj);
}

const PERMALINK = /^https?:\/\/[^/]+\.slack\.com\/archives\/([CGD][A-Z0-9]+)\/p(\d{10})(\d{6})(?:\?(.*))?$/;

/** A Slack message permalink → {channel, ts, thread_ts}; null for any other URL. */
export function parsePermalink(url) {
  const m = PERMALINK.exec(url);
  if (!m) return null;
  const params = new URLSearchParams(m[4] || "");
  return { channel: m[1], ts: `${m[2]}.${m[3]}`, thread_ts: params.get("thread_ts") || null };
}

function angle(inner, ctx) {
  const bar = inner.indexOf("|");
  const target = bar >= 0 ? inner.slice(0, bar) : inner;
  const label = bar >= 0 ? inner.slice(bar + 1) : "";
  if (target.startsWith("@")) {
    const id = target.slice(1);
    const name = label || ctx.users?.[id] || id;
    const cls = id === ctx.me ? "mention me" : "mention";
    return `<span class="${cls}" data-user="${escapeHtml(id)}">@${escapeHtml(decodeSlack(name))}</span>`;
  }
  if (target.startsWith("#")) {
    const id = target.slice(1);
    const name = label || ctx.channels?.[id] || id;
    return `<a href="#${escapeHtml(id)}" class="channel-link" data-channel="${escapeHtml(id)}">#${escapeHtml(decodeSlack(name))}</a>`;
  }
  if (target.startsWith("!date^")) return slackDate(target, label);
  if (target.startsWith("!subteam^")) return `<span class="mention">${escapeHtml(decodeSlack(label || "@group"))}</span>`;
  if (target.startsWith("!")) {
    const word = target.slice(1).split("^")[0];
    return `<span class="mention">@${escapeHtml(decodeSlack(label || word))}</span>`;
  }
  const url = decodeSlack(target);
  const text = label ? decodeSlack(label) : url;
  if (!/^(https?:|mailto:)/i.test(url)) return escapeHtml(text);
  const perma = parsePermalink(url);
  const extra = perma
    ? ` class="permalink" data-channel="${escapeHtml(perma.channel)}" data-ts="${escapeHtml(perma.ts)}"` +
      (perma.thread_ts ? ` data-thread-ts="${escapeHtml(perma.thread_ts)}"` : "")
    : "";
  return `<a href="${escapeHtml(url)}" target="_blank" rel="noopener noreferrer"${extra}>${escapeHtml(text)}</a>`;
}

const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
  "October", "November", "December"];
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

function ordinal(n) {
  const s = ["th", "st", "nd", "rd"], v = n % 100;
  return n + (s[(v - 20) % 10] || s[v] || s[0]);
}

function sameDay(a, b) {
  return a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();
}

function pretty(d, fallback) {
  const today = new Date();
  const yesterday = new Date(today.getTime() - 86400000);
  const tomorrow = new Date(today.getTime() + 86400000);
  if (sameDay(d, today)) return "today";
  if (sameDay(d, yesterday)) return "yesterday";
  if (sameDay(d, tomorrow)) return "tomorrow";
  return fallback;
}

export function ago(d, now = new Date()) {
  const seconds = Math.round((now.getTime() - d.getTime()) / 1000);
  const abs = Math.abs(seconds);
  const say = (n, unit) => (seconds >= 0 ? `${n} ${unit}${n === 1 ? "" : "s"} ago` : `in ${n} ${unit}${n === 1 ? "" : "s"}`);
  if (abs < 45) return seconds >= 0 ? "just now" : "in a moment";
  if (abs < 3600) return say(Math.round(abs / 60), "minute");
  if (abs < 86400) return say(Math.round(abs / 3600), "hour");
  return say(Math.round(abs / 86400), "day");
}

/** Slack's date formatting tokens ({date_short_pretty}, {time}, {ago}, …) for one Date. */
export function formatDate(format, d) {
  const date = `${MONTHS[d.getMonth()]} ${ordinal(d.getDate())}, ${d.getFullYear()}`;
  const short = `${MONTHS[d.getMonth()].slice(0, 3)} ${d.getDate()}, ${d.getFullYear()}`;
  const long = `${DAYS[d.getDay()]}, ${date}`;
  const pad = (n) => String(n).padStart(2, "0");
  const tokens = {
    date_num: `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`,
    date, date_short: short, date_long: long,
    date_pretty: pretty(d, date), date_short_pretty: pretty(d, short), date_long_pretty: pretty(d, long),
    time: d.toLocaleTimeString([], { hour: "numeric", minute: "2-digit" }),
    time_secs: d.toLocaleTimeString([], { hour: "numeric", minute: "2-digit", second: "2-digit" }),
    ago: ago(d),
  };
  return format.replace(/\{(\w+)\}/g, (m, name) => tokens[name] ?? m);
}

function slackDate(target, fallback) {
  const [, epoch, format = "{date}"] = target.split("^");
  const d = new Date(Number(epoch) * 1000);
  if (!epoch || Number.isNaN(d.getTime())) return escapeHtml(decodeSlack(fallback));
  return `<time datetime="${d.toISOString()}" title="${escapeHtml(d.toUTCString())}" ` +
    `data-epoch="${escapeHtml(epoch)}" data-format="${escapeHtml(format)}">${escapeHtml(formatDate(format, d))}</time>`;
}

function quotes(html) {
  const out = [];
  let quote = [];
  for (const line of html.split("\n")) {
    const m = /^&gt; ?(.*)$/.exec(line);
    if (m) {
      quote.push(m[1]);
      continue;
    }
    if (quote.length) out.push(`<blockquote>${quote.join("\n")}</blockquote>`);
    quote = [];
    out.push(line);
  }
  if (quote.length) out.push(`<blockquote>${quote.join("\n")}</blockquote>`);
  return out.join("\n").replace(/<\/blockquote>\n/g, "</blockquote>");
}

/**
 * Slack mrkdwn → HTML. ctx: {users: {id: name}, channels: {id: name}, me: user id}.
 */
export function mrkdwn(text, ctx = {}) {
  const slots = [];
  const hold = (html) => `\u0001${slots.push(html) - 1}\u0002`;
  let s = String(text ?? "");
  s = s.replace(/```([\s\S]*?)```/g, (_, code) => hold(`<pre class="pre">${escapeHtml(decodeSlack(code.replace(/^\n/, "")))}</pre>`));
  s = s.replace(/`([^`\n]+)`/g, (_, code) => hold(`<code>${escapeHtml(decodeSlack(code))}</code>`));
  s = s.replace(/<([^<>\n]+)>/g, (_, inner) => hold(angle(inner, ctx)));
  s = escapeHtml(decodeSlack(s));
  s = s.replace(/:([a-z0-9_+'-]+):/g, (m, name) => {
    const html = emojiHtml(name);
    return html ? hold(html) : m;
  });
  s = quotes(s);
  s = s.replace(/(?<![\w*])\*(?=\S)([^*\n]*?\S)\*(?![\w*])/g, "<b>$1</b>");
  s = s.replace(/(?<![\w_])_(?=\S)([^_\n]*?\S)_(?![\w_])/g, "<i>$1</i>");
  s = s.replace(/(?<![\w~])~(?=\S)([^~\n]*?\S)~(?![\w~])/g, "<s>$1</s>");
  s = s.replace(/\n/g, "<br>");
  return s.replace(/\u0001(\d+)\u0002/g, (_, i) => slots[Number(i)]);
}

// Block Kit as DOM for the decklog sandbox page: the blocks decklog sends (header, section with text, fields
// and accessory, context, divider, actions with buttons and selects, image, rich_text) and the inputs of
// modals (plain_text_input, static_select, checkboxes, radio_buttons, users_select, datepicker, ...).
//
// renderBlocks(blocks, ctx) → an element. ctx:
//   md:       the mrkdwn context ({users, channels, me})
//   people:   [{id, name}] for users_select, rooms: [{id, name}] for conversation selects
//   act(element, value, kind, node): a person used an interactive element (kind "button" or "select")
//   confirm(confirmObject) → Promise<boolean>: a button's confirmation dialog
//   open(url, anchor): a button with a url was clicked
//   errors:   {block_id: message} (a modal's response_action errors)

import { escapeHtml, mrkdwn, plainText, textObject } from "./mrkdwn.js";

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "html") node.innerHTML = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function optionLabel(option) {
  return option?.text?.text ?? option?.value ?? "";
}

function selectNode(element, ctx, { dispatch }) {
  const type = element.type;
  const multi = type.startsWith("multi_");
  const select = h("select", {
    class: `bk-select ${type}`,
    "data-action-id": element.action_id,
    multiple: multi,
    "aria-label": element.placeholder?.text || element.action_id,
  });
  let initial = null;
  const choices = [];
  if (type.includes("users_select")) {
    for (const person of ctx.people || []) choices.push({ value: person.id, label: person.name });
    initial = multi ? element.initial_users : element.initial_user;
  } else if (type.includes("conversations_select") || type.includes("channels_select")) {
    for (const room of ctx.rooms || []) choices.push({ value: room.id, label: `#${room.name}` });
    initial = multi ? element.initial_conversations || element.initial_channels : element.initial_conversation || element.initial_channel;
  } else if (type === "overflow") {
    for (const option of element.options || []) choices.push({ value: option.value, label: optionLabel(option) });
  } else {
    initial = multi ? (element.initial_options || []).map((o) => o.value) : element.initial_option?.value;
    for (const group of element.option_groups || []) {
      const node = h("optgroup", { label: group.label?.text || "" });
      for (const option of group.options || []) {
        const selected = multi ? initial.includes(option.value) : initial === option.value;
        node.append(h("option", { value: option.value, selected }, optionLabel(option)));
      }
      select.append(node);
    }
    for (const option of element.options || []) choices.push({ value: option.value, label: optionLabel(option) });
  }
  if (!multi) {
    const placeholder = type === "overflow" ? "⋯" : element.placeholder?.text || "Select an item";
    select.prepend(h("option", { value: "", disabled: true, selected: initial == null }, placeholder));
  }
  for (const choice of choices) {
    const selected = multi ? (initial || []).includes(choice.value) : initial === choice.value;
    select.append(h("option", { value: choice.value, selected }, choice.label));
  }
  if (dispatch) {
    select.addEventListener("change", () => {
      const value = multi ? [...select.selectedOptions].map((o) => o.value) : select.value;
      if (type === "overflow") select.value = "";
      ctx.act(element, value, "select", select);
    });
  }
  return select;
}

function choiceGroup(element, ctx, { dispatch }) {
  const many = element.type === "checkboxes";
  const name = `${element.action_id}-${Math.random().toString(36).slice(2, 8)}`;
  const initial = many ? (element.initial_options || []).map((o) => o.value) : [element.initial_option?.value];
  const box = h("div", { class: `bk-choices ${element.type}`, "data-action-id": element.action_id });
  for (const option of element.options || []) {
    const input = h("input", {
      type: many ? "checkbox" : "radio",
      name,
      value: option.value,
      checked: initial.includes(option.value),
    });
    if (dispatch) {
      input.addEventListener("change", () => {
        const checked = [...box.querySelectorAll("input:checked")].map((i) => i.value);
        ctx.act(element, many ? checked : checked[0] ?? null, "select", box);
      });
    }
    const label = h("label", { class: "bk-choice" }, input, h("span", { html: textObject(option.text, ctx.md) }));
    if (option.description) label.append(h("small", { html: textObject(option.description, ctx.md) }));
    box.append(label);
  }
  return box;
}

function buttonNode(element, ctx) {
  const style = element.style ? ` ${element.style}` : "";
  const button = h("button", {
    type: "button",
    class: `bk-button${style}`,
    "data-action-id": element.action_id,
    "data-value": element.value,
    html: plainText(element.text),
  });
  button.addEventListener("click", async () => {
    if (element.confirm && !(await ctx.confirm(element.confirm))) return;
    if (element.url) ctx.open(element.url, button);
    ctx.act(element, element.value ?? null, "button", button);
  });
  return button;
}

function textInput(element) {
  const attrs = {
    class: "bk-text-input",
    "data-action-id": element.action_id,
    placeholder: element.placeholder?.text,
    maxlength: element.max_length,
  };
  if (element.multiline) return h("textarea", { ...attrs, rows: 4 }, element.initial_value || "");
  const kind = { number_input: "number", email_text_input: "email", url_text_input: "url" }[element.type] || "text";
  return h("input", { ...attrs, type: kind, value: element.initial_value || "" });
}

/** One interactive element. dispatch: a change is an action (messages, Home); false inside input blocks. */
export function elementNode(element, ctx, { dispatch = true } = {}) {
  switch (element.type) {
    case "button":
      return buttonNode(element, ctx);
    case "static_select":
    case "external_select":
    case "multi_static_select":
    case "multi_external_select":
    case "users_select":
    case "multi_users_select":
    case "conversations_select":
    case "channels_select":
    case "multi_conversations_select":
    case "multi_channels_select":
    case "overflow":
      return selectNode(element, ctx, { dispatch });
    case "checkboxes":
    case "radio_buttons":
      return choiceGroup(element, ctx, { dispatch });
    case "datepicker":
    case "timepicker": {
      const input = h("input", {
        type: element.type === "datepicker" ? "date" : "time",
        class: "bk-text-input",
        "data-action-id": element.action_id,
        value: element.initial_date || element.initial_time || "",
      });
      if (dispatch) input.addEventListener("change", () => ctx.act(element, input.value, "select", input));
      return input;
    }
    case "plain_text_input":
    case "number_input":
    case "email_text_input":
    case "url_text_input":
      return textInput(element);
    case "image":
      return h("img", { class: "bk-image-accessory", src: element.image_url, alt: element.alt_text || "" });
    default:
      return h("span", { class: "bk-unsupported" }, `[${element.type}]`);
  }
}

function richText(block, ctx) {
  const inline = (elements = []) =>
    elements
      .map((el) => {
        if (el.type === "text") {
          let html = escapeHtml(el.text).replace(/\n/g, "<br>");
          const st = el.style || {};
          if (st.code) html = `<code>${html}</code>`;
          if (st.bold) html = `<b>${html}</b>`;
          if (st.italic) html = `<i>${html}</i>`;
          if (st.strike) html = `<s>${html}</s>`;
          return html;
        }
        if (el.type === "link") return mrkdwn(`<${el.url}|${el.text || el.url}>`, ctx.md);
        if (el.type === "user") return mrkdwn(`<@${el.user_id}>`, ctx.md);
        if (el.type === "channel") return mrkdwn(`<#${el.channel_id}>`, ctx.md);
        if (el.type === "emoji") return mrkdwn(`:${el.name}:`, ctx.md);
        if (el.type === "broadcast") return mrkdwn(`<!${el.range}>`, ctx.md);
        return "";
      })
      .join("");
  const part = (el) => {
    if (el.type === "rich_text_section") return h("div", { html: inline(el.elements) });
    if (el.type === "rich_text_preformatted") return h("pre", { class: "pre", html: inline(el.elements) });
    if (el.type === "rich_text_quote") return h("blockquote", { html: inline(el.elements) });
    if (el.type === "rich_text_list") {
      const list = h(el.style === "ordered" ? "ol" : "ul");
      for (const item of el.elements || []) list.append(h("li", { html: inline(item.elements) }));
      return list;
    }
    return null;
  };
  return h("div", { class: "bk-rich-text" }, (block.elements || []).map(part));
}

function inputBlock(block, ctx) {
  const element = block.element || {};
  const error = ctx.errors?.[block.block_id];
  return h(
    "div",
    {
      class: `bk-input${error ? " has-error" : ""}`,
      "data-block-id": block.block_id,
      "data-action-id": element.action_id,
      "data-type": element.type,
      "data-optional": block.optional ? "true" : "false",
    },
    h("label", { class: "bk-label" }, block.label?.text || "", block.optional ? h("span", { class: "optional" }, " (optional)") : null),
    elementNode(element, ctx, { dispatch: Boolean(block.dispatch_action) }),
    block.hint ? h("div", { class: "bk-hint", html: plainText(block.hint) }) : null,
    h("div", { class: "bk-error", role: "alert" }, error || ""),
  );
}

function block(b, ctx) {
  switch (b.type) {
    case "header":
      return h("div", { class: "bk-header", html: plainText(b.text) });
    case "divider":
      return h("hr", { class: "bk-divider" });
    case "section": {
      const main = h("div", { class: "bk-section-main" });
      if (b.text) main.append(h("div", { class: "bk-text", html: textObject(b.text, ctx.md) }));
      if (b.fields?.length) {
        main.append(h("div", { class: "bk-fields" }, b.fields.map((f) => h("div", { class: "bk-field", html: textObject(f, ctx.md) }))));
      }
      const accessory = b.accessory ? h("div", { class: "bk-accessory" }, elementNode(b.accessory, ctx)) : null;
      return h("div", { class: "bk-section", "data-block-id": b.block_id }, main, accessory);
    }
    case "context":
      return h(
        "div",
        { class: "bk-context" },
        (b.elements || []).map((el) =>
          el.type === "image"
            ? h("img", { class: "bk-context-image", src: el.image_url, alt: el.alt_text || "" })
            : h("span", { html: textObject(el, ctx.md) }),
        ),
      );
    case "actions":
      return h(
        "div",
        { class: "bk-actions", "data-block-id": b.block_id },
        (b.elements || []).map((el) => elementNode(el, ctx)),
      );
    case "image":
      return h(
        "figure",
        { class: "bk-image" },
        b.title ? h("figcaption", { html: plainText(b.title) }) : null,
        h("img", { src: b.image_url, alt: b.alt_text || "" }),
      );
    case "input":
      return inputBlock(b, ctx);
    case "rich_text":
      return richText(b, ctx);
    case "markdown":
      return h("div", { class: "bk-text", html: mrkdwn(b.text, ctx.md) });
    default:
      return h("div", { class: "bk-unsupported" }, `[unsupported block: ${b.type}]`);
  }
}

export function renderBlocks(blocks, ctx) {
  return h("div", { class: "blocks" }, (blocks || []).map((b) => block(b, ctx)));
}

/** A modal's input values as {block_id: {action_id: value}}, and the required inputs left empty. */
export function collectInputs(root) {
  const values = {};
  const missing = [];
  for (const node of root.querySelectorAll(".bk-input")) {
    const type = node.dataset.type;
    const actionId = node.dataset.actionId;
    let value = null;
    if (type === "checkboxes" || type === "radio_buttons") {
      const checked = [...node.querySelectorAll("input:checked")].map((i) => i.value);
      value = type === "checkboxes" ? checked : checked[0] ?? null;
    } else {
      const field = node.querySelector("select, input, textarea");
      if (field?.multiple) value = [...field.selectedOptions].map((o) => o.value);
      else value = field?.value || null;
    }
    const empty = value === null || value === "" || (Array.isArray(value) && value.length === 0);
    if (empty && node.dataset.optional !== "true") missing.push(node.dataset.blockId);
    values[node.dataset.blockId] = { [actionId]: empty && !Array.isArray(value) ? null : value };
  }
  return { values, missing };
}

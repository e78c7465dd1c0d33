// Typed helpers for bl plugins written in JavaScript.
//
// A plugin's entry (app.js) exports the function its world exports (a
// gate's `check(root, config)`) and imports these helpers as
// `./bl_plugin.js`; `bl plugin build` puts this file beside it. They build
// the verdicts and errors bl expects, read the JSON config as a Rust
// plugin's serde would, and read files from the workspace handle.

/** A count: a whole number from 0 to 2**32 - 1, as a Rust `usize` field
 * reads it (usize is 32 bits in wasm32). */
export const COUNT = 'count';

/** An error for a config that does not fit: throw it. A plugin that cannot
 * decide errs; it never fails the work instead. */
export function badConfig(message) {
  return { tag: 'bad-config', val: message };
}

/** An error for a refused capability call. */
export function capability(message) {
  return { tag: 'capability', val: message };
}

/** An error for anything else that keeps the plugin from deciding. */
export function internal(message) {
  return { tag: 'internal', val: message };
}

/** A publication policy's decision to let the effect go out. */
/** The world's function as bl calls it (`bl plugin build` puts every
 * plugin's behind it): an error built here (`badConfig`, `capability`,
 * `internal`) is thrown on as it is; anything else thrown (a TypeError, a
 * string) becomes an internal error that says what it was and where in the
 * plugin's own code, instead of a trap in the runtime's glue. */
export function guarded(fn, name, file) {
  // Run when the component is built: a plugin without its function is
  // refused then, never at its first call.
  if (typeof fn !== 'function') {
    throw new Error(`${file} exports no function \`${name}\`, which its world calls`);
  }
  return (...args) => {
    try {
      return fn(...args);
    } catch (e) {
      if (e && typeof e === 'object' && ['bad-config', 'capability', 'internal'].includes(e.tag)) throw e;
      const what = e instanceof Error ? `${e.name}: ${e.message}` : `${file} threw ${typeof e === 'string' ? JSON.stringify(e) : String(e)}`;
      const frames = e instanceof Error && typeof e.stack === 'string' ? e.stack.split('\n') : [];
      const at = frames.map((f) => f.trim()).find((f) => f && !f.includes('bl_plugin.js') && !f.includes('bl_entry.js'));
      throw internal(at ? `${what} (at ${at.replace(/[^@\s]*\//, '')})` : what);
    }
  };
}

export function allow(reason) {
  return { allow: true, reason };
}

/** A publication policy's decision to hold the effect back. */
export function deny(reason) {
  return { allow: false, reason };
}

/** What a transform returns once it has written its outputs. */
export function report(summary) {
  return { summary };
}

// A number in the config, as written.
class JsonNumber {
  constructor(text) {
    this.text = text;
  }
}

// JSON, parsed keeping each number's text, so that `1.0` is not taken for
// the whole number 1 (JSON.parse cannot tell them apart; serde can).
function parseJson(text) {
  let at = 0;
  const fail = (what) => { throw badConfig(`the config is not JSON: ${what} at offset ${at}`); };
  const space = () => { while (at < text.length && ' \t\n\r'.includes(text[at])) at++; };
  const value = () => {
    space();
    const c = text[at];
    if (c === '{') {
      at++;
      // No prototype: a key such as `__proto__` is only a key.
      const out = Object.create(null);
      space();
      if (text[at] === '}') { at++; return out; }
      for (;;) {
        space();
        if (text[at] !== '"') fail('a key');
        const key = string();
        // serde refuses a field given twice; so does every bl SDK.
        if (Object.prototype.hasOwnProperty.call(out, key)) fail(`duplicate field \`${key}\``);
        space();
        if (text[at++] !== ':') fail('a colon');
        out[key] = value();
        space();
        if (text[at] === ',') { at++; continue; }
        if (text[at++] === '}') return out;
        fail('a comma or a brace');
      }
    }
    if (c === '[') {
      at++;
      const out = [];
      space();
      if (text[at] === ']') { at++; return out; }
      for (;;) {
        out.push(value());
        space();
        if (text[at] === ',') { at++; continue; }
        if (text[at++] === ']') return out;
        fail('a comma or a bracket');
      }
    }
    if (c === '"') return string();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, at)) { at += word.length; return v; }
    }
    const number = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(at));
    if (!number) fail('a value');
    at += number[0].length;
    return new JsonNumber(number[0]);
  };
  const string = () => {
    const match = /^"((?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*)"/.exec(text.slice(at));
    if (!match) fail('a string');
    const decoded = JSON.parse(match[0]);
    // A lone surrogate (`\ud800`) is no Unicode text: serde refuses it.
    if (/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(decoded)) {
      fail('a lone surrogate in a string');
    }
    at += match[0].length;
    return decoded;
  };
  const out = value();
  space();
  if (at !== text.length) fail('the end');
  return out;
}

/** The config as an object, checked: `required` maps each key to its type
 * ('string', 'boolean', 'number', COUNT), as `{file: 'string', min_words:
 * COUNT}`; any other key is refused, as a Rust plugin's
 * `deny_unknown_fields` does. Each key must be there, unless `defaults`
 * gives its value (as serde's `#[serde(default)]`), as `{min_words: 50}`. */
export function config(text, required, defaults = {}) {
  const value = parseJson(text);
  if (value === null || typeof value !== 'object' || Array.isArray(value) || value instanceof JsonNumber) {
    throw badConfig('the config must be a JSON object');
  }
  const out = {};
  for (const key of Object.keys(value)) {
    if (!(key in required)) throw badConfig(`unknown field \`${key}\`, expected one of ${Object.keys(required).join(', ')}`);
  }
  for (const [key, kind] of Object.entries(required)) {
    if (!(key in value) && key in defaults) {
      out[key] = defaults[key];
      continue;
    }
    if (!(key in value)) throw badConfig(`missing field \`${key}\``);
    const found = value[key];
    const isNumber = found instanceof JsonNumber;
    if (kind === COUNT) {
      if (!isNumber || !/^\d+$/.test(found.text) || BigInt(found.text) >= 2n ** 32n) {
        throw badConfig(`\`${key}\` must be a whole number from 0 to 4294967295`);
      }
      out[key] = Number(found.text);
    } else if (kind === 'number') {
      if (!isNumber) throw badConfig(`\`${key}\` must be a number`);
      out[key] = Number(found.text);
    } else {
      if (typeof found !== kind) throw badConfig(`\`${key}\` must be a ${kind}`);
      out[key] = found;
    }
  }
  return out;
}

/** One finding; `path` (relative to the workspace) and `line` place it. */
export function finding(message, severity = 'medium', { rule, path, line } = {}) {
  const location = path === undefined ? undefined : { path, line, column: undefined };
  return { severity, message, rule, location };
}

export function passed(summary, findings = []) {
  return { passed: true, summary, findings, evidenceDigest: undefined };
}

export function failed(summary, findings = []) {
  return { passed: false, summary, findings, evidenceDigest: undefined };
}

/** The file's text, or undefined when it does not exist. Any other refusal
 * (a path outside the workspace, a directory, a file too large, bytes that
 * are not UTF-8) throws a capability error: the plugin cannot decide. As
 * the Rust SDK's `read_to_string` with `?` does. */
export function readText(root, path) {
  let bytes;
  try {
    bytes = root.read(path);
  } catch (e) {
    const refused = e && e.payload !== undefined ? e.payload : e;
    if (refused && refused.tag === 'not-found') return undefined;
    throw capability(`${path}: ${refused && refused.val !== undefined ? refused.val : String(refused)}`);
  }
  try {
    // A byte-order mark is kept, as Rust's from_utf8 keeps it.
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw capability(`${path}: not UTF-8 text`);
  }
}

// Unicode's White_Space characters: what Rust's split_whitespace splits on.
// A regular expression's \s differs (it takes U+FEFF and leaves out U+0085).
const WHITE_SPACE = new Set('\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000');

/** The words of `text`, split on Unicode White_Space as Rust's
 * `str::split_whitespace` splits them. */
export function splitWords(text) {
  const words = [];
  let word = '';
  for (const ch of text) {
    if (WHITE_SPACE.has(ch)) {
      if (word) words.push(word);
      word = '';
    } else {
      word += ch;
    }
  }
  if (word) words.push(word);
  return words;
}

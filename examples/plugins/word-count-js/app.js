// word-count-js: a gate that passes when `file` has at least `min_words`
// words. Config: {"file": "report.md", "min_words": 200}.

import * as bl from './bl_plugin.js';

export function check(root, config) {
  const { file, min_words: minimum } = bl.config(config, { file: 'string', min_words: bl.COUNT });
  const text = bl.readText(root, file);
  if (text === undefined) return bl.failed(`${file} is missing`);
  const words = bl.splitWords(text).length;
  if (words >= minimum) return bl.passed(`${file} has ${words} words`);
  return bl.failed(`${file} has ${words} words, fewer than ${minimum}`, [
    bl.finding('too short', 'medium', { rule: 'word-count/min', path: file }),
  ]);
}

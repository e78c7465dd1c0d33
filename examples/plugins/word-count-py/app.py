"""word-count-py: a gate that passes when `file` has at least `min_words`
words. Config: {"file": "report.md", "min_words": 200}."""

import bl_plugin
import wit_world


class WitWorld(wit_world.WitWorld):
    def check(self, root, config):
        cfg = bl_plugin.config(config, {"file": str, "min_words": bl_plugin.COUNT})
        path, minimum = cfg["file"], cfg["min_words"]
        text = bl_plugin.read_text(root, path)
        if text is None:
            return bl_plugin.failed(f"{path} is missing")
        words = len(bl_plugin.split_words(text))
        if words >= minimum:
            return bl_plugin.passed(f"{path} has {words} words")
        return bl_plugin.failed(
            f"{path} has {words} words, fewer than {minimum}",
            [bl_plugin.finding("too short", "medium", rule="word-count/min", path=path)],
        )

#!/usr/bin/env python3
"""Generates data/tiny_corpus.txt: deterministic English-like text from a fixed word list and grammar.

Every word, template and the generator itself are written for trainplan, so the corpus is free to
redistribute (same licence as the repository). Output is byte-identical on every run and Python version
(a fixed 64-bit LCG, no `random`). Usage: python3 data/gen_tiny_corpus.py > data/tiny_corpus.txt
"""

TARGET_BYTES = 120_000


class Lcg:
    def __init__(self, seed):
        self.s = seed & (2**64 - 1)

    def below(self, n):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        return (self.s >> 33) % n

    def pick(self, xs):
        return xs[self.below(len(xs))]


NAMES = ["Ada", "Ben", "Clara", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kira", "Leo",
         "Mira", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tova"]
ADJ = ["small", "old", "quiet", "bright", "heavy", "patient", "careful", "green", "tired", "clever", "cold",
       "warm", "busy", "narrow", "wide", "slow", "quick", "gentle", "broken", "new"]
NOUN = ["engine", "station", "river", "bridge", "garden", "letter", "lantern", "wagon", "harbor", "market",
        "mill", "tower", "field", "road", "boat", "clock", "window", "forest", "valley", "village"]
PLACE = ["the harbor", "the mill", "the north station", "the old bridge", "the market square", "the valley",
         "the forest road", "the village well", "the lighthouse", "the school"]
VERB_T = ["carried", "found", "painted", "repaired", "counted", "watched", "opened", "closed", "followed",
          "measured", "cleaned", "loaded", "described", "remembered", "built"]
VERB_I = ["waited", "laughed", "rested", "listened", "worked", "slept", "sang", "walked", "wondered", "smiled"]
TIME = ["at dawn", "before noon", "in the evening", "after the rain", "every morning", "on Sunday",
        "late at night", "in early spring", "during the storm", "when the bell rang"]
COUNT = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve"]
CONJ = ["and then", "but", "so", "while", "because"]


def noun_phrase(r):
    if r.below(3) == 0:
        return "the " + r.pick(NOUN)
    return "the " + r.pick(ADJ) + " " + r.pick(NOUN)


def clause(r):
    k = r.below(5)
    if k == 0:
        return f"{r.pick(NAMES)} {r.pick(VERB_T)} {noun_phrase(r)}"
    if k == 1:
        return f"{r.pick(NAMES)} {r.pick(VERB_I)} near {r.pick(PLACE)}"
    if k == 2:
        return f"{noun_phrase(r)} was {r.pick(ADJ)} {r.pick(TIME)}"
    if k == 3:
        return f"{r.pick(NAMES)} {r.pick(VERB_T)} {r.pick(COUNT)} {r.pick(NOUN)}s at {r.pick(PLACE)}"
    return f"{r.pick(NAMES)} and {r.pick(NAMES)} {r.pick(VERB_I)} {r.pick(TIME)}"


def sentence(r):
    s = clause(r)
    if r.below(3) == 0:
        s += f" {r.pick(CONJ)} {clause(r)}"
    if r.below(4) == 0:
        s += f" {r.pick(TIME)}"
    s = s[0].upper() + s[1:]
    if r.below(10) == 0:
        return f'"{s}," said {r.pick(NAMES)}.'
    return s + ("?" if r.below(15) == 0 else ".")


def main():
    r = Lcg(20240520)
    out, size, chapter = [], 0, 1
    while size < TARGET_BYTES:
        if chapter == 1 or r.below(12) == 0:
            title = f"Chapter {chapter}: The {r.pick(ADJ).capitalize()} {r.pick(NOUN).capitalize()}\n\n"
            out.append(title)
            size += len(title)
            chapter += 1
        para = " ".join(sentence(r) for _ in range(3 + r.below(5))) + "\n\n"
        out.append(para)
        size += len(para)
    print("".join(out).rstrip("\n"))


if __name__ == "__main__":
    main()

"""Runs test modules of numba-cuda's own suite (shipped in its wheel) and
prints each test's outcome as JSON: {test id: "pass" | "fail" | "error" |
"skip: reason"}. tests/frameworks/test_numba_suite.py runs it twice, with
Numba's memory manager and with gpubroker.numba, and compares.

    python numba_own.py MODULE...
"""

import json
import sys
import unittest


class Outcomes(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcomes = {}

    def addSuccess(self, test):
        self.outcomes[test.id()] = "pass"

    def addFailure(self, test, err):
        self.outcomes[test.id()] = "fail"
        self.failures.append((test, self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        self.outcomes[test.id()] = "error"
        self.errors.append((test, self._exc_info_to_string(err, test)))

    def addSkip(self, test, reason):
        self.outcomes[test.id()] = "skip: %s" % reason

    def addExpectedFailure(self, test, err):
        self.outcomes[test.id()] = "pass"

    def addUnexpectedSuccess(self, test):
        self.outcomes[test.id()] = "fail"


def main():
    result = Outcomes()
    for module in sys.argv[1:]:
        suite = unittest.defaultTestLoader.loadTestsFromName(module)
        suite.run(result)
    for test, text in result.errors + result.failures:  # why, for the log
        print("== %s\n%s" % (test.id(), text), file=sys.stderr)
    json.dump(result.outcomes, sys.stdout)


if __name__ == "__main__":
    main()

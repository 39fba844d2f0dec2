// attention helpers

/**
 * Leases ordered by when they become revocable, as a binary min-heap of (dueMs, leaseId).
 * Entries are never removed early: a renewal pushes a new entry and the old one is found
 * stale when it comes due (its deadline no longer matches the lease's), so no timer per
 * lease and no search on renewal.
 */
export class DeadlineIndex {
  private readonly dues: number[] = [];
  private readonly ids: string[] = [];

  get size(): number {
    return this.dues.length;
  }

  push(dueMs: number, leaseId: string): void {
    this.dues.push(dueMs);
    this.ids.push(leaseId);
    this.up(this.dues.length - 1);
  }

  peekDueMs(): number | undefined {
    return this.dues[0];
  }

  /** Removes and returns the earliest entry if it is due at `nowMs`. */
  popDue(nowMs: number): { dueMs: number; leaseId: string } | undefined {
    if (this.dues.length === 0 || this.dues[0]! > nowMs) return undefined;
    const top = { dueMs: this.dues[0]!, leaseId: this.ids[0]! };
    const lastDue = this.dues.pop()!;
    const lastId = this.ids.pop()!;
    if (this.dues.length > 0) {
      this.dues[0] = lastDue;
      this.ids[0] = lastId;
      this.down(0);
    }
    return top;
  }

  private up(index: number): void {
    let i = index;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (this.dues[parent]! <= this.dues[i]!) return;
      this.swap(i, parent);
      i = parent;
    }
  }

  private down(index: number): void {
    let i = index;
    const n = this.dues.length;
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let smallest = i;
      if (left < n && this.dues[left]! < this.dues[smallest]!) smallest = left;
      if (right < n && this.dues[right]! < this.dues[smallest]!) smallest = right;
      if (smallest === i) return;
      this.swap(i, smallest);
      i = smallest;
    }
  }

  private swap(a: number, b: number): void {
    [this.dues[a], this.dues[b]] = [this.dues[b]!, this.dues[a]!];
    [this.ids[a], this.ids[b]] = [this.ids[b]!, this.ids[a]!];
  }
}

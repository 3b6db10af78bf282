import CofferCore
import Foundation

extension InMemoryLedger: DeliveryRepository {
    public func record(_ reports: [Delivery]) {
        for report in reports {
            if let index = deliveryRows.firstIndex(where: {
                $0.redemptionId.sameBytes(report.redemptionId) && $0.assetId.sameBytes(report.assetId) && $0.sha256.sameBytes(report.sha256)
            }) {
                deliveryRows[index].merge(report)
            } else {
                var row = report
                row.sequence = Int64(deliveryRows.count + 1)
                deliveryRows.append(row)
            }
        }
    }

    public func deliveries(redemptionId: String?, after: Int64, limit: Int) -> [Delivery] {
        Array(
            deliveryRows.lazy.filter { $0.sequence > after && (redemptionId.map($0.redemptionId.sameBytes) ?? true) }.prefix(max(0, limit)))
    }
}
